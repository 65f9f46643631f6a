"""The same workload through vLLM V1 and SGLang, side by side (docs/vllm_vs_sglang.md).

Ten requests decode while a long prompt arrives. vLLM's step serves the running decodes
first and fills the rest of the token budget with a chunk of the prompt
(vllm/v1/core/sched/scheduler.py:657, 912); SGLang runs a prefill batch whenever it can form
one and the running requests wait for it (sglang/srt/managers/scheduler.py:3870-3883),
for ceil(L / C) steps while the prompt is chunked. The page lists both timelines, then the
properties whose verdicts differ: on this workload (both references, evaluated on their
Step observables) and in the manifests.

    python -m checker.docs.contrast                     print the page
    python -m checker.docs.contrast --write FILE        write it
    python -m checker.docs.contrast --check FILE        exit 1 when FILE is stale
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from model import registry as engines
from model.core.ops import CONCRETE
from model.core.types import RequestSpec, Step, StepRecord, Workload
from model.run import simulate
from model.sglang.config import Config as SGLangConfig
from model.vllm.config import Config as VllmConfig
from properties import catalogue
from properties.manifest import load

COMMAND = "python -m checker.docs.contrast --write docs/vllm_vs_sglang.md"
CHUNK = 64
STEPS = 9

# One scheduler, two spellings: 64 tokens per step / per chunk, 32 running requests, a
# pool of 4096 KV tokens (vLLM: 16-token blocks, one null block), context 1024.
VLLM = VllmConfig(max_num_batched_tokens=CHUNK, max_num_seqs=32, max_model_len=1024,
                  block_size=16, num_gpu_blocks=257)
SGLANG = SGLangConfig(max_total_num_tokens=4096, chunked_prefill_size=CHUNK,
                      max_prefill_tokens=512, max_running_requests=32, context_length=1024,
                      disable_radix_cache=True)
REQUESTS = (*(RequestSpec(f"d{i}", 4, 40) for i in range(10)),
            RequestSpec("long", 200, 4, arrival_step=3))

PROPERTIES = ("no_decode_in_prefill_batch", "decode_stall_ceil_l_over_c", "budget_respected",
              "running_before_waiting", "at_most_one_chunked", "prefill_budgets_respected",
              "kv_blocks_conserved", "computed_within_tokens", "running_within_max_num_seqs")


def workloads() -> dict[str, Workload]:
    """The contrast workload for each engine."""
    return {
        "vllm-v1": Workload(config=VLLM, requests=REQUESTS, steps=STEPS, engine="vllm-v1"),
        "sglang": Workload(config=SGLANG, requests=REQUESTS, steps=STEPS, engine="sglang"),
    }


def _cell(record: StepRecord, step: Step, ids: Sequence[str]) -> str:
    """A step as 'decodes + prefill chunks'."""
    decoding = {ids[i] for i, o in enumerate(step.slots)
                if o.was_running and o.num_tokens - o.num_computed_tokens_before == 1}
    decodes = [rid for rid, _ in record.scheduled if rid in decoding]
    prefills = [f"{rid}:{n}" for rid, n in record.scheduled if rid not in decoding]
    parts = []
    if decodes:
        parts.append(f"{len(decodes)} decode" + ("s" if len(decodes) > 1 else ""))
    if len(prefills) > 2:
        parts.append(f"prefill of {len(prefills)} requests")
    else:
        parts += [f"prefill {p}" for p in prefills]
    total = sum(n for _, n in record.scheduled)
    return (" + ".join(parts) or "idle") + f" ({total} tok)"


def _grid(records: Sequence[StepRecord], ids: Sequence[str]) -> list[str]:
    """One row per request, one column per step: tokens scheduled ('.' none)."""
    header = "| request | " + " | ".join(str(r.step) for r in records) + " |"
    lines = [header, "|---|" + "---|" * len(records)]
    for rid in ids:
        cells = [str(dict(r.scheduled).get(rid, ".")) for r in records]
        lines.append(f"| {rid} | " + " | ".join(cells) + " |")
    return lines


def _holds(name: str, steps: Sequence[Step]) -> bool:
    prop = catalogue.get(name)
    return all(prop.holds(CONCRETE, steps, t) for t in range(len(steps)))


def _manifest_differences() -> list[str]:
    """Properties with an entry for both engines whose expected verdicts differ."""
    by: dict[str, dict[str, set[str]]] = {}
    for e in load().entries:
        if e.params:
            continue
        verdict = "VIOLATED" if e.expected == "VIOLATED" else "HOLDS"
        by.setdefault(e.property, {}).setdefault(e.engine, set()).add(verdict)
    lines = []
    for name in sorted(by):
        v, s = by[name].get("vllm-v1"), by[name].get("sglang")
        if v and s and v != s:
            lines.append(f"| `{name}` | {', '.join(sorted(v))} | {', '.join(sorted(s))} |")
    return lines


def page() -> str:
    """The generated page."""
    runs = {name: simulate(w) for name, w in workloads().items()}
    steps = {name: engines.get(name).observe(workloads()[name], recs)
             for name, recs in runs.items()}
    ids = [r.id for r in workloads()["sglang"].arrival_order()]
    lines = [
        "# vLLM V1 and SGLang on the same workload", "",
        f"<!-- generated by `{COMMAND}`; do not edit -->", "",
        "Ten requests (prompt 4, 40 output tokens) are decoding when a 200-token prompt "
        f"arrives at step 3. Both engines get {CHUNK} tokens per step (vLLM "
        f"`max_num_batched_tokens={CHUNK}`, SGLang `chunked_prefill_size={CHUNK}`), 32 running "
        "requests and a 4096-token KV pool.", "",
        "- vLLM V1 " + engines.get("vllm-v1").version + ": the running requests are served "
        "first and the prompt gets what is left of the budget, so every step mixes decodes "
        "and a prefill chunk (vllm/v1/core/sched/scheduler.py:657, 912).",
        "- SGLang " + engines.get("sglang").version + ": a step that can form a prefill batch "
        "runs only that, so the decodes pause for ceil(200 / 64) = 4 steps while the prompt "
        "is chunked (sglang/srt/managers/scheduler.py:3870-3883, 3973-4004).", "",
        "## Side by side", "",
        "| step | vLLM V1 | SGLang |", "|---|---|---|",
    ]
    v, s = runs["vllm-v1"], runs["sglang"]
    for k in range(STEPS):
        kind = dict(s[k].extra)["batch"]
        lines.append(f"| {k + 1} | {_cell(v[k], steps['vllm-v1'][k], ids)} | "
                     f"{_cell(s[k], steps['sglang'][k], ids)} [{kind}] |")
    for name, title in (("vllm-v1", "vLLM V1"), ("sglang", "SGLang")):
        lines += ["", f"## {title}: tokens per request and step", "",
                  *_grid(runs[name], ids)]
    lines += ["", "## Properties on this workload", "",
              "Each engine's reference run, evaluated on its own Step observables "
              "(properties/catalogue.py, properties/sglang.py).", "",
              "| property | vLLM V1 | SGLang |", "|---|---|---|"]
    for name in PROPERTIES:
        row = [("holds" if _holds(name, steps[e]) else "**violated**")
               for e in ("vllm-v1", "sglang")]
        lines.append(f"| `{name}` | {row[0]} | {row[1]} |")
    lines += ["", "## Manifest verdicts that differ", "",
              "Expected verdicts of properties checked on both engines "
              "(properties/manifests/vllm_v1.toml, properties/manifests/sglang.toml).", "",
              "| property | vLLM V1 | SGLang |", "|---|---|---|", *_manifest_differences(), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Print, write or check the page."""
    parser = argparse.ArgumentParser(prog="python -m checker.docs.contrast", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", help="write the page to FILE")
    group.add_argument("--check", metavar="FILE", help="exit 1 when FILE is stale")
    args = parser.parse_args(argv)
    text = page()
    if args.write:
        Path(args.write).write_text(text)
        return 0
    if args.check:
        path = Path(args.check)
        if not path.exists() or path.read_text() != text:
            print(f"stale: {path}; regenerate with `{COMMAND}`")
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
