"""`python -m checker.cli` is the `batchproof` command."""

from checker.cli.main import main

raise SystemExit(main())
