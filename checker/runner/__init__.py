"""How jobs run: the process pool, worker start-up, stopping on SIGINT / SIGTERM, progress.

The commands (checker/cli/) say what to run; this package runs it, for `check`, `worst`
(through check's jobs), `diff --ablate-all`, `sweep` and `audit`'s witness searches alike.
`stops` holds the signal handling, `pool` the pools.
"""
