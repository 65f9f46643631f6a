"""The page of `batchproof seeds` (checker/cli/seeds.py): reproduce seed 000's Table 3,
groups A and B, and its 6-step timeline by running the vLLM V1 reference scheduler, and
print (or write) the markdown page docs/seed_reproductions.md. No number on the page is
typed in: each one is read off a simulation."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from checker.config.flags import FLAG_FOR_FIELD
from model.core.types import RequestSpec, StepRecord, Workload
from model.vllm.config import Config
from model.vllm.reference import PHASE_DECODE, chunk_phase, iter_steps
from model.vllm.validation import rejection

PAGE = Path("docs/seed_reproductions.md")
COMMAND = "batchproof seeds --write docs/seed_reproductions.md"

PROMPT_ID = "P"
DECODE_MAX_TOKENS = 1000  # the decodes outlive every run below
HORIZON = 40  # steps simulated; "never" means 0 prompt tokens in every step up to it
BLOCKS = 4096  # ample KV: the seed's simplified model has no KV blocks
SEED_M = 32  # the seed's max_num_seqs (groups A and B: M=32)


@dataclass(frozen=True, slots=True)
class PrefillOutcome:
    """What the prompt got, read from the step right after its arrival (step 2) on."""

    decode_tokens: int  # tokens the decodes got in step 2
    decodes_served: int  # decodes scheduled in step 2
    prefill_tokens: int  # tokens the prompt got in step 2
    prefill_left: int  # prompt tokens still to compute after step 2
    chunks: tuple[int, ...]  # the prompt's tokens per step, from step 2 until it is done
    steps_to_finish: int | None  # steps from step 2 until the prompt is computed; None: never
    rejected_by: str | None  # vLLM's validation rule that rejects the config, if any


def seed_config(budget: int, max_num_seqs: int) -> Config:
    """The seed's setting: only the budget and max_num_seqs matter; KV is ample."""
    return Config(max_num_batched_tokens=budget, max_num_seqs=max_num_seqs,
                  num_gpu_blocks=BLOCKS)


def decodes_and_prompt(num_decodes: int, prompt_len: int, cfg: Config) -> Workload:
    """D one-token prompts arrive at step 1 (step 1 prefills their token, so from step 2 on
    each is a one-token decode); the prompt arrives at step 2, behind running decodes."""
    decodes = [RequestSpec(f"d{i}", prompt_len=1, max_tokens=DECODE_MAX_TOKENS,
                           arrival_step=1) for i in range(num_decodes)]
    prompt = RequestSpec(PROMPT_ID, prompt_len=prompt_len, max_tokens=1, arrival_step=2)
    return Workload(config=cfg, requests=(*decodes, prompt), steps=HORIZON)


def rejection_rule(cfg: Config) -> str | None:
    """The vLLM validation rule that rejects `cfg`, or None."""
    rejected_by = rejection(cfg)
    return None if rejected_by is None else rejected_by.rule


def prefill_outcome(num_decodes: int, prompt_len: int, cfg: Config) -> PrefillOutcome:
    """Simulate D decodes plus one prompt and read off what the prompt gets."""
    records = [r for _, r in iter_steps(decodes_and_prompt(num_decodes, prompt_len, cfg))]
    first = records[1]  # step 2
    decode_counts = [n for rid, n in first.scheduled if rid != PROMPT_ID]
    chunks: list[int] = []
    steps_to_finish = None
    for record in records[1:]:
        chunks.append(dict(record.scheduled).get(PROMPT_ID, 0))
        if dict(record.num_computed_tokens).get(PROMPT_ID, 0) >= prompt_len:
            steps_to_finish = len(chunks)
            break
    return PrefillOutcome(
        decode_tokens=sum(decode_counts),
        decodes_served=len(decode_counts),
        prefill_tokens=dict(first.scheduled).get(PROMPT_ID, 0),
        prefill_left=prompt_len - dict(first.num_computed_tokens)[PROMPT_ID],
        chunks=tuple(chunks),
        steps_to_finish=steps_to_finish,
        rejected_by=rejection_rule(cfg),
    )


# ---------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------


def flags(cfg: Config) -> str:
    """The config as `batchproof simulate` flags (budget and max_num_seqs only)."""
    return (f"`{FLAG_FOR_FIELD['max_num_batched_tokens']} {cfg.max_num_batched_tokens} "
            f"{FLAG_FOR_FIELD['max_num_seqs']} {cfg.max_num_seqs}`")


def finish_text(outcome: PrefillOutcome) -> str:
    """The 'steps to finish' cell."""
    if outcome.steps_to_finish is None:
        return f"never: 0 tokens in each of steps 2-{HORIZON}"
    return f"{outcome.steps_to_finish} ({' + '.join(map(str, outcome.chunks))})"


def validity_text(outcome: PrefillOutcome) -> str:
    """The 'vLLM accepts?' cell."""
    if outcome.rejected_by is None:
        return "yes"
    return f"no: `{outcome.rejected_by}` (simulated with --no-validate)"


def outcome_row(label: str, cfg: Config, outcome: PrefillOutcome) -> str:
    """One markdown table row for a computed outcome."""
    decodes = str(outcome.decode_tokens)
    return (f"| {label} | {flags(cfg)} | {validity_text(outcome)} | {decodes} | "
            f"{outcome.prefill_tokens} | {outcome.prefill_left} | {finish_text(outcome)} |")


_TABLE_HEAD = (
    "| row | config | vLLM accepts? | decode tokens | prefill tokens | prefill left | "
    "steps to finish the prefill |",
    "|---|---|---|---|---|---|---|",
)

SEED_TABLE3 = {  # budget -> (decode, prefill, left, rate text) as printed in seed 000
    8: ("8", "0", "24", "0 token/step, never"),
    16: ("10", "6", "18", "24/6 = 4 steps"),
    32: ("10", "22", "2", "22 then 2"),
}


def table3_section() -> list[str]:
    """Seed 000, Table 3: D=10, P=24, B in {8, 16, 32}."""
    lines = [
        "## Table 3: D=10 one-token decodes, one 24-token prompt, budget B",
        "",
        "The seed gives no max_num_seqs for Table 3; we use its groups' M=32. vLLM rejects "
        "B < M (`max_num_batched_tokens >= max_num_seqs`, vllm/config/scheduler.py:328-333), "
        "so for B=8 and B=16 the seed's setting is simulated with --no-validate, and the "
        "nearest accepted config (M = B) is shown beside it.",
        "",
        *_TABLE_HEAD,
    ]
    for budget in sorted(SEED_TABLE3):
        seed = SEED_TABLE3[budget]
        lines.append(f"| B={budget}, seed 000 | (simplified model) | - | {seed[0]} | {seed[1]} | "
                     f"{seed[2]} | {seed[3]} |")
        as_seed = seed_config(budget, SEED_M)
        lines.append(outcome_row(f"B={budget}, seed's M=32", as_seed,
                                 prefill_outcome(10, 24, as_seed)))
        if rejection_rule(as_seed) is not None:
            nearest = seed_config(budget, min(SEED_M, budget))
            lines.append(outcome_row(f"B={budget}, nearest accepted", nearest,
                                     prefill_outcome(10, 24, nearest)))
    b8 = prefill_outcome(10, 24, seed_config(8, SEED_M))
    lines += [
        "",
        f"B=8: the decodes get {b8.decode_tokens} tokens because only "
        f"{b8.decodes_served} of the 10 decodes are ever running: step 1 admits one-token "
        "prompts until the 8-token budget is spent, and from then on the running decodes "
        "spend the whole budget before the waiting loop runs (vllm/v1/core/sched/"
        "scheduler.py:659, 912). Ten running decodes under B=8 is not a reachable vLLM "
        "state, with or without validation; the seed's simplified model, where the 10 "
        "decodes are one block, reports the same 8 / 0 / 24.",
        "",
    ]
    return lines


def group_section(title: str, num_decodes: int, seed_text: str, note: str = "") -> list[str]:
    """Seed 000's interactive groups: D decodes, P=24, B=16, M=32."""
    as_seed = seed_config(16, SEED_M)
    nearest = seed_config(16, 16)
    return [
        f"## {title}: D={num_decodes}, P=24, B=16, M=32",
        "",
        f"Seed 000 says: {seed_text}",
        "",
        *_TABLE_HEAD,
        outcome_row("seed's config", as_seed, prefill_outcome(num_decodes, 24, as_seed)),
        outcome_row("nearest accepted", nearest, prefill_outcome(num_decodes, 24, nearest)),
        "",
        *([note, ""] if note else []),
    ]


# ---- the 6-step timeline -----------------------------------------------------------------

TIMELINE_BUDGET = 8
TIMELINE_STEPS = 6


def timeline_workload() -> Workload:
    """Our reconstruction of the seed's timeline: A (6-token prompt) arrives at step 1,
    B (10 tokens) at step 2, C (8 tokens) at step 3, budget 8. Step s is the seed's t(s-1)."""
    cfg = Config(max_num_batched_tokens=TIMELINE_BUDGET, max_num_seqs=TIMELINE_BUDGET,
                 num_gpu_blocks=BLOCKS)
    requests = (
        RequestSpec("A", prompt_len=6, max_tokens=16, arrival_step=1),
        RequestSpec("B", prompt_len=10, max_tokens=16, arrival_step=2),
        RequestSpec("C", prompt_len=8, max_tokens=16, arrival_step=3),
    )
    return Workload(config=cfg, requests=requests, steps=TIMELINE_STEPS)


def timeline_steps() -> list[tuple[StepRecord, dict[str, str]]]:
    """Each step's record and the phase of each scheduled chunk."""
    out = []
    for before, record in iter_steps(timeline_workload()):
        views = {v.request_id: v for v in before}
        out.append((record, {rid: chunk_phase(views[rid], n) for rid, n in record.scheduled}))
    return out


def timeline_bar(record: StepRecord, phases: dict[str, str]) -> str:
    """One column of the seed's chart laid on its side: a cell per budget token, upper case
    for a prefill chunk, lower case for a decode, '.' for budget nobody could use."""
    cells = "".join((rid.lower() if phases[rid] == PHASE_DECODE else rid) * n
                    for rid, n in record.scheduled)
    return cells.ljust(TIMELINE_BUDGET, ".")


def timeline_section() -> list[str]:
    """The seed's 6-step chart with an 8-token budget, reconstructed."""
    steps = timeline_steps()
    lines = [
        "## The 6-step timeline with an 8-token budget (our reconstruction)",
        "",
        "Seed 000 draws 6 scheduling steps sharing an 8-token budget and says: t1 has A's "
        "decode and B's prefill; t2 has three requests in one column: A's decode, B "
        "completing its prefill, C starting its prefill; blank space means no request "
        "could use the budget. The seed gives no workload, so this one is ours: A (6-token "
        "prompt) arrives at step 1, B (10 tokens) at step 2, C (8 tokens) at step 3, each "
        "with max_tokens 16; max_num_batched_tokens = max_num_seqs = 8; ample KV. Our step "
        "s is the seed's t(s-1).",
        "",
        "```",
    ]
    for record, phases in steps:
        label = f"t{record.step - 1}"
        detail = ", ".join(f"{rid} {n} {phases[rid]}" for rid, n in record.scheduled)
        lines.append(f"{label}  |{timeline_bar(record, phases)}|  {detail}")
    lines += [
        "```",
        "",
        "Upper case: a prefill chunk; lower case: a decode; `.`: budget left unused.",
        "",
    ]
    return lines


def render_page() -> str:
    """The whole markdown page."""
    lines = [
        "# Seed 000 reproduced on the vLLM V1 reference scheduler",
        "",
        f"Generated by `{COMMAND}`; do not edit by hand (tests/test_seeds.py fails when "
        "this page is stale).",
        "",
        "Every number below except the rows marked \"seed 000\" is read off a run of the "
        "reference scheduler (model/vllm/reference.py, vLLM v0.32.0). The setting: D "
        "one-token prompts arrive at step 1, and step 1 prefills their single token, so "
        "from step 2 on each is a one-token decode, as in the seed. The 24-token prompt "
        f"arrives at step 2, behind the running decodes. Decodes have max_tokens "
        f"{DECODE_MAX_TOKENS}, so they run for the whole simulation ({HORIZON} steps); "
        f"KV is ample ({BLOCKS} blocks of 16 tokens); the other fields are vLLM's "
        "defaults (chunked prefill on, FCFS). \"decode tokens\", \"prefill tokens\" and "
        "\"prefill left\" are read in step 2, the first step that sees the prompt; \"steps "
        "to finish\" counts steps from step 2 until the prompt is fully computed, with the "
        "prompt's tokens per step in brackets.",
        "",
        *table3_section(),
        *group_section("Group A (shared budget)", 10,
                       "6 tokens this step, 18 left, 4 steps."),
        *group_section("Group B (budget eaten by the decodes)", 16,
                       "0 tokens every step; the prompt never completes.",
                       "With M=32 the waiting loop stops because the decodes leave no "
                       "budget (vllm/v1/core/sched/scheduler.py:912); with M=16 the "
                       "max_num_seqs cap stops it too (scheduler.py:922-924)."),
        *timeline_section(),
    ]
    return "\n".join(lines).rstrip("\n") + "\n"
