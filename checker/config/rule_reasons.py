"""Why each SchedulerConfig rule exists (`batchproof config --explain-rules`): each rule is
dropped in turn and the checker looks for what goes wrong without it, against the same
property with the rule kept (model/vllm_config.RULES)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from checker.config.hazards import (
    ABSENT,
    BOUNDED,
    UNKNOWN_LABEL,
    WITNESSED,
    Envelope,
    Hazard,
    HazardResult,
    from_job,
    never,
)
from checker.methods.jobs import Job, run
from model.vllm.config import ENGINE_VLLM_V1, Config
from properties import catalogue
from properties.manifest import custom_config, with_bounds


@dataclass(frozen=True, slots=True)
class RuleReason:
    """What dropping one SchedulerConfig rule lets happen in the model."""

    rule: str
    text: str
    upstream: str
    verdict: str  # WITNESSED | NO_CHANGE | NO_FAILURE | NOT_MODELLED | UNKNOWN
    detail: str
    result: HazardResult | None = None

    def to_json(self) -> dict[str, object]:
        """The `--explain-rules --json` object of this rule."""
        return {"rule": self.rule, "text": self.text, "upstream": self.upstream,
                "verdict": self.verdict, "detail": self.detail,
                "witness": None if self.result is None else self.result.to_json()["witness"]}


NO_CHANGE, NO_FAILURE, NOT_MODELLED = "NO CHANGE", "NO PROPERTY FAILS", "NOT MODELLED"


@dataclass(frozen=True, slots=True)
class RuleProbe:
    """How to drop one rule: a small family that breaks only that rule (its ranges keep
    every other rule true), the same family repaired, and the properties to compare."""

    rule: str
    broken: Config
    ranges: tuple[tuple[str, int, int], ...]
    repaired: Config
    properties: tuple[tuple[str, tuple[tuple[str, int], ...]], ...]
    bounds: tuple[tuple[str, int], ...]
    why: str
    inert: bool = False  # the rule's values cannot change any step (argued in `why`)


_TINY = Config(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=16, block_size=4,
               num_gpu_blocks=9)
_SMALL_BOUNDS = (("slots", 2), ("depth", 4), ("max_prompt_len", 15), ("max_max_tokens", 4))

RULE_PROBES: tuple[RuleProbe, ...] = (
    RuleProbe("batched_tokens_ge_model_len_without_chunking",
              replace(_TINY, enable_chunked_prefill=False), (("max_num_batched_tokens", 2, 15),),
              replace(_TINY, enable_chunked_prefill=False, max_num_batched_tokens=16),
              (("never_finishes", ()),),
              (("slots", 1), ("depth", 3), ("max_prompt_len", 15), ("max_max_tokens", 2)),
              "a prompt longer than the budget can never be scheduled whole, and chunked "
              "prefill is off, so it waits forever (scheduler.py:1160-1167)"),
    RuleProbe("batched_tokens_ge_num_seqs", replace(_TINY, max_num_seqs=4),
              (("max_num_batched_tokens", 1, 8), ("max_num_seqs", 1, 8)), replace(_TINY),
              (("exhausting_decodes_fill_max_num_seqs", ()),), _SMALL_BOUNDS + (("slots", 3),),
              "running decodes can use the whole budget while seats are still free, so "
              "waiting prompts starve below max_num_seqs (seed 000's theorem needs D = B = "
              "max_num_seqs)"),
    RuleProbe("active_seqs_le_num_seqs", replace(_TINY, max_num_seqs=1, max_num_active_seqs=2),
              (), replace(_TINY, max_num_seqs=2, max_num_active_seqs=2),
              (("running_within_max_num_seqs", ()),), _SMALL_BOUNDS,
              "admission is capped by max_num_active_seqs (scheduler.py:922-924), so running "
              "outgrows max_num_seqs and vLLM's own assertion (1411) fails"),
    RuleProbe("long_prefill_threshold_le_model_len",
              replace(_TINY, long_prefill_token_threshold=17), (),
              replace(_TINY, long_prefill_token_threshold=16),
              (("starvation", (("k", 2),)), ("head_of_line_blocking", (("k", 1),)),
               ("budget_respected", ())), _SMALL_BOUNDS,
              "a request lacks fewer than max_model_len tokens, so a threshold above it never "
              "caps anything (scheduler.py:708-709, 1155-1156)", inert=True),
    RuleProbe("batched_tokens_gt_draft_slots",
              replace(_TINY, max_num_batched_tokens=1, max_num_seqs=1,
                      speculative_method="draft_model", num_speculative_tokens=3), (),
              replace(_TINY, max_num_batched_tokens=2, max_num_seqs=1,
                      speculative_method="draft_model", num_speculative_tokens=3),
              (("never_finishes", ()),),
              (("slots", 1), ("depth", 3), ("max_prompt_len", 4), ("max_max_tokens", 2)),
              "with max_num_batched_tokens at most the draft slots both loops stop before "
              "the first request (input_budget <= draft_slots, scheduler.py:661, 918): "
              "nothing is ever scheduled"),
    RuleProbe("watermark_range", replace(_TINY, watermark=1.0), (), replace(_TINY, watermark=0.9),
              (("starvation", (("k", 2),)), ("head_of_line_blocking", (("k", 1),)),
               ("kv_blocks_conserved", ())), _SMALL_BOUNDS,
              "with watermark >= 1 no request is admitted while another runs "
              "(kv_cache_manager.py:509-516): requests run one at a time"),
)

_NOT_MODELLED_RULES = {
    "positive_fields": "a zero budget or zero seats schedules nothing; pydantic rejects it "
                       "before a scheduler exists, and the model's sizes start at 1",
    "policy_known": "an unknown policy has no scheduler: vLLM raises 'Unknown scheduling "
                    "policy' (scheduler.py:216-221)",
    "speculative_tokens_positive": "a speculative method with k = 0 has no drafts to "
                                   "schedule; pydantic rejects it (gt=0) before a scheduler "
                                   "exists (config/speculative.py:393)",
}


def explain_rules(timeout_s: float) -> tuple[RuleReason, ...]:
    """For each SchedulerConfig rule (model/vllm_config.RULES), what dropping it does."""
    from model.vllm.validation import RULES
    probes = {p.rule: p for p in RULE_PROBES}
    out = []
    for rule in RULES:
        if rule.name in probes:
            out.append(_probe(rule.name, rule.text, rule.upstream, probes[rule.name], timeout_s))
        else:
            out.append(RuleReason(rule.name, rule.text, rule.upstream, NOT_MODELLED,
                                  _NOT_MODELLED_RULES.get(rule.name, "not probed")))
    return tuple(out)


def _probe(name: str, text: str, upstream: str, probe: RuleProbe,
           timeout_s: float) -> RuleReason:
    """The first property that fails with the rule dropped and holds with it kept."""
    bounds = dict(probe.bounds)
    hazard = Hazard(name, text, "", lambda e: (), upstream, False, never)
    undecided = []
    for prop, params in probe.properties:
        h = replace(hazard, property=prop, params=lambda e, p=params: p)
        dropped = _rule_job(h, probe.broken, probe.ranges, False, bounds, timeout_s)
        if dropped.verdict == UNKNOWN_LABEL:
            undecided.append(f"{prop}: {dropped.detail}")
            continue
        if dropped.verdict != WITNESSED:
            continue
        kept = _rule_job(h, probe.repaired, (), True, bounds, timeout_s)
        if kept.verdict in (ABSENT, BOUNDED):
            desc = catalogue.get(prop, **dict(params)).description
            return RuleReason(name, text, upstream, WITNESSED,
                              f"without it, '{desc}' fails: {probe.why}; with the rule it "
                              f"holds ({kept.detail})", dropped)
    if undecided:
        return RuleReason(name, text, upstream, UNKNOWN_LABEL, "; ".join(undecided))
    props = ", ".join(p for p, _ in probe.properties)
    checked = (f"no property among {props} fails without it that holds with it "
               f"({bounds['slots']} requests, {bounds['depth']} steps)")
    if probe.inert:
        return RuleReason(name, text, upstream, NO_CHANGE,
                          f"dropping it changes nothing in the model: {probe.why}; {checked}")
    return RuleReason(name, text, upstream, NO_FAILURE,
                      f"what dropping it does: {probe.why}; {checked}")


def _rule_job(h: Hazard, cfg: Config, ranges: tuple[tuple[str, int, int], ...],
              validated: bool, bounds: dict[str, int], timeout_s: float) -> HazardResult:
    nc = with_bounds(replace(custom_config("rule_dropped" if not validated else "rule_kept",
                                           cfg, validated=validated), ranges=ranges), **bounds)
    job = Job(engine=ENGINE_VLLM_V1, property=h.property, params=h.params(Envelope()),
              config=nc, expected=None, timeout_s=timeout_s)
    return from_job(h, run(job), bounds)
