"""Serving hazards of one vLLM configuration, each decided honestly:

- PROVED absent: a closed-form argument over all request counts and lengths (capacity
  lemma below, z3-checked for the config's numbers), or the hazard needs a setting the
  config does not have (chunked prefill off, the PRIORITY policy);
- WITNESSED: a minimal trace from the checker (BMC through checker.jobs), replayed on
  the reference; or, for hazards that need more requests than the bound allows, a
  constructed trace checked on the reference (said so, and not minimal). The reference
  has no size cap: constructed runs, and witnesses the model found without the prefix
  cache, are run on it with the deployment's own switches (prefix caching, async
  scheduling, speculative decoding), whatever the symbolic search could carry;
- HOLDS within bounds: no witness with at most `slots` requests and `depth` steps;
- UNKNOWN: solver unknown, time limit, or the KV pool size was not given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import z3

from checker.methods.jobs import Job, JobResult, run
from checker.methods.replay import DivergenceError, ReplayResult, replay
from checker.methods.theorems import Premise
from checker.methods.verdict import HOLDS, PROVED, UNKNOWN, VIOLATED, Counterexample
from model.core.errors import InputError
from model.core.ops import CONCRETE, Ops
from model.core.types import EosEvent, RequestSpec, StepRecord, Workload
from model.vllm.config import ENGINE_VLLM_V1, GROUP_MAMBA, POLICY_PRIORITY, Config
from model.vllm.deployment import (
    ASYNC_SCHEDULING,
    MODEL_SCOPE,
    PREFIX_CACHING,
    SPECULATIVE_DECODING,
    Deployment,
    Feature,
    outside_reason,
)
from model.vllm.engine import records_to_steps, reference_only
from model.vllm.reference import VllmV1Scheduler, iter_steps
from model.vllm.state import RuleConfig, cache_model_fits, within_bounds
from properties import catalogue
from properties.catalogue import Property
from properties.manifest import custom_config, with_bounds

ABSENT, WITNESSED, BOUNDED = "PROVED absent", "WITNESSED", "HOLDS within bounds"
UNKNOWN_LABEL = "UNKNOWN"


@dataclass(frozen=True, slots=True)
class Envelope:
    """The workload bound the hazards are searched within, and the hazard parameters."""

    slots: int = 3
    depth: int = 5
    max_prompt_len: int | None = None  # None: max_model_len - 1
    max_max_tokens: int | None = None  # None: depth + 1 (no witness lost, see bounds_of)
    max_priority: int = 1
    timeout_s: float = 40.0
    starvation_steps: int = 3
    hol_steps: int = 1
    unchunked_steps: int = 2
    inversion_steps: int = 2
    max_preemptions: int = 1


@dataclass(frozen=True, slots=True)
class Witness:
    """A run that shows a hazard: the workload, the reference's records, the step."""

    workload: Workload
    replayed: ReplayResult
    violated_at: int
    minimal: bool
    loop: int | None = None
    first_shown: int = 1  # long constructed runs show only their last steps

    def shown(self) -> tuple[StepRecord, ...]:
        """The records the output shows: steps first_shown .. violated_at."""
        return self.replayed.records[self.first_shown - 1: self.violated_at]


@dataclass(frozen=True, slots=True)
class HazardResult:
    """One hazard's verdict with its evidence."""

    name: str
    title: str
    verdict: str
    detail: str
    bounds: tuple[tuple[str, int], ...] = ()
    witness: Witness | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, object]:
        """The `--json` object of this hazard."""
        out: dict[str, object] = {
            "hazard": self.name, "title": self.title, "verdict": self.verdict,
            "detail": self.detail, "bounds": dict(self.bounds),
            "seconds": round(self.seconds, 3), "witness": None}
        if self.witness is not None:
            w = self.witness
            out["witness"] = {
                "minimal": w.minimal, "violated_at": w.violated_at, "loop": w.loop,
                "first_step_shown": w.first_shown,
                "requests": [{"id": r.id, "prompt_len": r.prompt_len,
                              "max_tokens": r.max_tokens, "arrival_step": r.arrival_step,
                              "priority": r.priority} for r in w.workload.requests],
                "eos": [{"id": e.id, "step": e.step} for e in w.workload.eos],
                "steps": [rec.to_json() for rec in w.shown()]}
            if w.workload.kv_hits:  # a KV connector's environment (model/workload.py's form)
                out["witness"]["kv_hits"] = [  # type: ignore[index]
                    {"id": h.id, "tokens": h.tokens, **({"async": True} if h.load_async else {})}
                    for h in w.workload.kv_hits]
                out["witness"]["kv_loads"] = [  # type: ignore[index]
                    {"id": e.id, "step": e.step, **({"failed": True} if e.failed else {})}
                    for e in w.workload.kv_loads]
        return out


ANY_FEATURE = "*"


@dataclass(frozen=True, slots=True)
class Argument:
    """A closed-form argument that a hazard is absent. `claim` states it for the config's
    numbers (None when they do not support it); it applies only when every premise holds
    and every deployment feature the model leaves out is one it `holds_with` (feature
    name, or ANY_FEATURE, -> why the argument does not depend on it)."""

    claim: Callable[[Config], str | None]
    premises: tuple[Premise[Config], ...] = ()
    holds_with: tuple[tuple[str, str], ...] = ()
    # It counts one full-attention KV cache group's blocks (the model's pool): a premise
    # the output names (checker/config/model_kind.py).
    kv_layout: bool = False

    def broken(self, cfg: Config) -> tuple[Premise[Config], ...]:
        """The premises `cfg` does not meet."""
        return tuple(p for p in self.premises if not p.holds(cfg))

    def uncovered(self, features: tuple[Feature, ...]) -> tuple[Feature, ...]:
        """The features the argument does not hold with."""
        names = {name for name, _ in self.holds_with}
        return () if ANY_FEATURE in names else tuple(f for f in features
                                                     if f.name not in names)


@dataclass(frozen=True, slots=True)
class Hazard:
    """A hazard: the property that rules it out, how to prove it absent, and how to build
    a witness when the bound is too small."""

    name: str
    title: str
    property: str
    params: Callable[[Envelope], tuple[tuple[str, int], ...]]
    upstream: str
    needs_pool: bool
    absent: Argument
    slots: int | None = None  # overrides the envelope's (lasso: one request)
    construct: Callable[[Config, Envelope], Workload | None] | None = None
    kv_only: Callable[[Config], bool] = lambda cfg: False  # needs an allocation failure
    min_requests: Callable[[Config], int] = lambda cfg: 1  # fewer cannot show it
    # A property of its own (not in the catalogue, so no search): the hazard is decided by
    # its argument or shown by its constructed run on the reference.
    own: Callable[[Envelope], Property] | None = None
    construct_first: bool = False  # try the constructed run before the search
    # An own property that reads the config's numbers (decided as `own` is).
    own_cfg: Callable[[Config], Property] | None = None

    def prop(self, env: Envelope, cfg: Config | None = None) -> Property:
        """The property that rules the hazard out."""
        if self.own_cfg is not None:
            assert cfg is not None, f"hazard {self.name}'s property reads the config"
            return self.own_cfg(cfg)
        if self.own is not None:
            return self.own(env)
        return catalogue.get(self.property, **dict(self.params(env)))


# --- closed-form arguments ----------------------------------------------------------------

def per_request_blocks(cfg: Config) -> int:
    """The most blocks one live request ever holds.

    allocate_slots asks for cdiv(min(num_computed + n + lookahead, max_model_len),
    block_size) blocks and keeps what it holds (kv_cache_manager.py:541-571,
    single_type_kv_cache_manager.py:229-235); the full-sequence admission check reads
    min(num_tokens, max_model_len) without the lookahead (522-539), never more. A chunk
    stops at max_model_len - 1 computed tokens (scheduler.py:714-721; a request finishes
    at max_model_len, sched/utils.py:114-119) and scheduled drafts are part of the chunk,
    so without lookahead a request holds at most cdiv(max_model_len - 1, block_size)
    (the rules' invariant, checker/induction.well_formed); with lookahead L > 0 the ask
    reaches min(max_model_len - 1 + L, max_model_len) = max_model_len tokens, so
    cdiv(max_model_len, block_size): one block more exactly when max_model_len - 1 is a
    multiple of block_size. Rolled-back drafts keep their blocks, within the same bound.

    With KV cache groups (Config.kv_cache_groups) the sum over them: every attention
    group's table is as long as a full-attention one (a sliding window's real blocks are
    fewer), and a Mamba group holds 1 + k state blocks (model/vllm/kv_cache.py).
    """
    top = min(cfg.max_model_len - 1 + cfg.num_lookahead_tokens, cfg.max_model_len)
    one = -(-top // cfg.block_size)
    if not cfg.hybrid_kv:
        return one
    return sum(1 + cfg.num_spec_tokens if g.kind == GROUP_MAMBA else one
               for g in cfg.kv_cache_groups)


def _bound_text(cfg: Config) -> str:
    """How per_request_blocks counts, for the arguments' text."""
    if cfg.num_lookahead_tokens:
        return (f"cdiv(min(max_model_len - 1 + {cfg.num_lookahead_tokens} lookahead, "
                "max_model_len), block_size)")
    return "cdiv(max_model_len - 1, block_size)"


def capacity_lemma(cfg: Config, timeout_s: float = 5.0, requests: int | None = None
                   ) -> str | None:
    """When the usable pool holds max_num_active_reqs requests of the largest size plus
    the watermark, no allocation ever fails: the RUNNING loop never preempts
    (scheduler.py:777-844) and the waiting head never fails its block checks
    (kv_cache_manager.py:522-539, 575-579). Checked with z3 for this config's numbers
    and ANY number R <= max_num_active_reqs of requests holding ANY blocks up to the
    per-request bound. Returns the argument, or None when the pool is smaller, or in Mamba's
    align mode, where a request's state blocks are not bounded by 1 + k (the state of two
    steps back waits for the processed tokens, single_type_kv_cache_manager.py:1613-1641)."""
    if reference_only(cfg) is not None:
        return None
    c, usable, wm = per_request_blocks(cfg), cfg.usable_blocks, cfg.watermark_blocks
    cap = cfg.max_num_active_reqs if requests is None else min(requests,
                                                                cfg.max_num_active_reqs)
    held, others, need, r = z3.Ints("held_by_others held_self need requests")
    # A running request asking for blocks: others (R - 1 requests) hold <= (R - 1) * c,
    # it ends with at most c; a waiting head is tried only while R < cap (922-924), so
    # R - 1 <= cap - 1 others hold blocks and the head needs at most c plus the watermark.
    running_ok = z3.Implies(
        z3.And(r >= 1, r <= cap, held >= 0, held <= (r - 1) * c, need >= 0, need <= c),
        held + need <= usable)
    admit_ok = z3.Implies(
        z3.And(r >= 0, r <= cap - 1, held >= 0, held <= r * c, need >= 0, need <= c),
        held + need + wm <= usable)
    s = z3.Solver()
    s.set(timeout=int(timeout_s * 1000))
    s.add(z3.Not(z3.And(running_ok, admit_ok)))
    if s.check() != z3.unsat:
        return None
    who = "max_num_active_reqs=" if requests is None else "at most "
    return (f"the {usable} usable blocks hold {who}{cap} requests of at most "
            f"{_bound_text(cfg)} = {c} blocks each plus the watermark "
            f"({wm}), so no block allocation ever fails (z3: any number of requests up to "
            f"{cap}, any lengths)")


def decode_starvation(cfg: Config) -> str:
    """Seed 000's theorem applied to the config: running decodes alone (one token each)
    use the whole budget only when there are at least as many as the budget
    (checker/methods/theorems/vllm_v1.py, proved for all sizes)."""
    seats, budget = cfg.max_num_active_reqs, cfg.token_budget
    if seats < budget:
        return (f"running decodes alone never starve a prompt: at most {seats} decode at "
                f"once, below the {budget}-token budget (seed 000's theorem)")
    return (f"once {budget} requests decode at once they alone use the {budget}-token "
            "budget and every waiting prompt gets 0 tokens (seed 000's theorem)")


def pool_shortfall(cfg: Config) -> str:
    """How many longest requests fill the pool, for the detail of a KV hazard."""
    c = per_request_blocks(cfg)
    if c == 0:  # max_model_len 1: no prompt is admissible (input_processor.py:574-602)
        return "no request ever holds a block: max_model_len 1 leaves no room for a prompt"
    fits = (cfg.usable_blocks - cfg.watermark_blocks) // c
    return (f"the pool holds {fits} requests of max_model_len ({c} blocks each), fewer than "
            f"max_num_active_reqs={cfg.max_num_active_reqs}: KV pressure needs about "
            f"{fits + 1} long concurrent requests")


# Why the capacity arguments hold with prefix caching on: a request still references at
# most cdiv(max_model_len - 1, block_size) blocks, a shared block is one block of the pool,
# evictable cached blocks count as free and are evicted on demand (block_pool.py:868-875,
# get_new_blocks), and a hit on an evictable block is allocated like a new one
# (single_type_kv_cache_manager.py:175-265), so no request needs more than the lemma counts.
_CACHE_SHARES_ONLY = (PREFIX_CACHING.name,
                      "sharing and evictable cached blocks never raise a request's block "
                      "need above the lemma's per-request bound (block_pool.py:868-875, "
                      "single_type_kv_cache_manager.py:175-265)")

CHUNKED_ON = Premise(
    "chunked_prefill_on", "chunked prefill is on (with it off the waiting head is also "
    "refused for the budget, scheduler.py:1160-1167)", lambda cfg: cfg.enable_chunked_prefill)
LONE_PROMPT_FITS = Premise(
    "lone_prompt_fits_budget", "a lone prompt can be scheduled: chunked prefill is on, or the "
    "token budget (max_num_scheduled_tokens when set) covers max_model_len - 1 tokens "
    "(scheduler.py:1160-1167 refuses a longer whole prompt every step)",
    lambda cfg: cfg.enable_chunked_prefill or cfg.token_budget >= cfg.max_model_len - 1)


def _no_preemption(cfg: Config) -> str | None:
    lemma = capacity_lemma(cfg)
    return None if lemma is None else lemma + ": no request is ever preempted"


def _no_hol(cfg: Config) -> str | None:
    lemma = capacity_lemma(cfg)
    if lemma is None:
        return None
    return (lemma + "; with chunked prefill on the head is then only refused when no "
            "budget or seat is left, which stops every request behind it too")


def _no_self_preemption(cfg: Config) -> str | None:
    if reference_only(cfg) is not None:
        # Align mode: vLLM's startup check counts 2 + k state blocks, and a lone request
        # can hold more while its last token is in flight (tests/test_mamba_align.py).
        return None
    need = per_request_blocks(cfg)
    if cfg.hybrid_kv:
        # vLLM's startup check counts a sliding window's admission cap, which leaves out
        # the lookahead slots (kv_cache_interface.py:859-885): only a pool that holds
        # every group's longest table rules a lone request's self-preemption out.
        if need > cfg.usable_blocks:
            return None
        return (f"a request alone holds at most {need} blocks over its KV cache groups "
                f"({_bound_text(cfg)} per attention group, 1 + k per Mamba group) and the "
                f"pool has {cfg.usable_blocks} usable, so a lone request never preempts "
                "itself and runs until max_tokens or max_model_len")
    return (f"a request alone holds at most {_bound_text(cfg)} = {need} "
            "blocks, and vLLM refuses to start unless the pool holds cdiv(max_model_len, "
            "block_size) besides the null block (kv_cache_utils.py:1003-1040), so in every "
            "engine that starts a lone request never preempts itself and runs until "
            "max_tokens or max_model_len")


def ample_pool(cfg: Config) -> int:
    """A pool size (with the null block) for which capacity_lemma holds: used when the
    user did not give the pool, for hazards that do not need it."""
    want = cfg.max_num_active_reqs * per_request_blocks(cfg)
    blocks = want + 2
    while (blocks - 1) - int(cfg.watermark * blocks) < want:
        blocks *= 2
    return blocks


def _chunked_on(cfg: Config) -> str | None:
    if cfg.enable_chunked_prefill:
        return ("chunked prefill is on: a prompt takes what is left of the budget, the "
                "refusal at scheduler.py:1160-1167 needs chunked prefill off")
    return None


def _not_priority(cfg: Config) -> str | None:
    if cfg.policy != POLICY_PRIORITY:
        return ("the policy is fcfs: the waiting queue ignores priorities by design "
                "(request_queue.py:75-128), so no request is 'better' than another")
    return None


def never(cfg: Config) -> str | None:
    """No setting rules the hazard out."""
    return None


# Why they hold with the AsyncScheduler: it caps a chunk at max_model_len - 1 computed
# tokens as the Scheduler does (scheduler.py:716-721), so a request still holds at most
# cdiv(max_model_len - 1, block_size) blocks, and a request whose EOS is in flight is still
# one of the running ones the lemma counts.
_ASYNC_SAME_BOUND = (ASYNC_SCHEDULING.name,
                     "the AsyncScheduler caps a request's computed tokens at max_model_len "
                     "- 1 as well (scheduler.py:716-721), and a request whose EOS is in "
                     "flight still counts among the running requests")

# Why the capacity arguments hold with speculative decoding: per_request_blocks counts the
# lookahead where allocate_slots does (kv_cache_manager.py:541-571), drafts are part of the
# chunk the max_model_len - 1 cap bounds (scheduler.py:703-721), and preemption still
# happens only on an allocation failure (777-844). Not for head-of-line blocking: the
# uniform-decode padding refuses a waiting head for the budget alone (1141-1152).
_SPEC_COUNTED = (SPECULATIVE_DECODING.name,
                 "the per-request bound counts the lookahead slots allocate_slots reserves "
                 "(kv_cache_manager.py:541-571) and the drafts within max_model_len - 1 "
                 "(scheduler.py:703-721); rejected drafts keep their blocks within it")

NO_ARGUMENT = Argument(never)
NO_PREEMPTION = Argument(_no_preemption, holds_with=(_CACHE_SHARES_ONLY, _ASYNC_SAME_BOUND,
                                                     _SPEC_COUNTED), kv_layout=True)
NO_HOL = Argument(_no_hol, (CHUNKED_ON,), holds_with=(_CACHE_SHARES_ONLY, _ASYNC_SAME_BOUND),
                  kv_layout=True)
NO_SELF_PREEMPTION = Argument(
    _no_self_preemption, (LONE_PROMPT_FITS,), holds_with=((
        PREFIX_CACHING.name, "a lone request shares no block with another and, never "
        "preempted, never looks its own blocks up again (scheduler.py:960-967)"),
        _ASYNC_SAME_BOUND, _SPEC_COUNTED), kv_layout=True)
# Both hazards are defined by the setting they need (properties/hazards.py): no feature
# of the engine makes them appear without it.
CHUNKING_ON = Argument(_chunked_on, holds_with=((
    ANY_FEATURE, "the refusal needs chunked prefill off (scheduler.py:1160-1167)"),))
NOT_PRIORITY = Argument(_not_priority, holds_with=((
    ANY_FEATURE, "an inversion needs priorities, which FCFS never reads"),))


# --- constructed witnesses (more requests than the bound) --------------------------------

def _inversion_workload(cfg: Config, env: Envelope) -> Workload | None:
    """max_num_active_reqs requests of priority 1 take every seat at step 1, then one of
    priority 0 arrives: it waits while they decode (scheduler.py:922-924)."""
    cap = cfg.max_num_active_reqs
    if cfg.policy != POLICY_PRIORITY or cap > 2048:  # about 8 s of reference checking
        return None
    steps = env.inversion_steps + 1
    low = [RequestSpec(id=f"r{i}", prompt_len=1, max_tokens=steps + 1, arrival_step=1,
                       priority=1) for i in range(cap)]
    high = RequestSpec(id=f"r{cap}", prompt_len=1, max_tokens=1, arrival_step=2, priority=0)
    return Workload(config=cfg, requests=(*low, high), steps=steps)


def _hol_workload(cfg: Config, env: Envelope) -> Workload | None:
    """Long prompts arrive together, then one 1-token request. With chunked prefill they
    are admitted one after another as the budget frees (each passes the full-sequence
    check while it fits); the first that no longer fits the pool stops admission, and the
    small request behind it waits (scheduler.py:1275-1282). Needs more seats than
    long requests the pool holds."""
    bs, budget = cfg.block_size, cfg.token_budget
    grow = 8
    for _ in range(8):
        prompt = cfg.max_model_len - 1 - grow
        if prompt < bs:
            return None
        each = -(-prompt // bs)
        fillers = (cfg.usable_blocks - cfg.watermark_blocks) // each + 1
        steps = fillers * (-(-prompt // budget) + 1) + env.hol_steps + 2
        if steps <= grow:
            break
        grow = 2 * steps
    else:
        return None
    # The reference run and the O(requests^2) property check stay within seconds.
    if fillers + 1 > cfg.max_num_active_reqs or fillers > 256 or fillers * steps > 300_000:
        return None
    longs = [RequestSpec(id=f"r{i}", prompt_len=prompt, max_tokens=grow, arrival_step=1)
             for i in range(fillers)]
    small = RequestSpec(id=f"r{fillers}", prompt_len=1, max_tokens=1, arrival_step=1)
    return Workload(config=cfg, requests=(*longs, small), steps=steps)


# The constructed run stays within seconds: a step of the reference costs about the blocks
# its requests hold (it lists a request's block hashes at each allocation), so requests x
# steps x blocks per request is bounded (examples/configs/llama70b_tp8_h100.yaml: 33M,
# 2-3 s to drive and as long to check).
_REPEAT_FILLERS = 256
_REPEAT_WORK = 100_000_000


def _repeat_workload(cfg: Config, env: Envelope) -> Workload | None:
    """M short requests and long ones arrive at step 1; once they all decode, long ones
    arrive until the pool is nearly full, then one more request (the victim) sized to what
    is left, so that it is admitted: the full-sequence check reads only its prompt
    (kv_cache_manager.py:522-539), not the decode growth to come. The growth runs the pool
    out and the RUNNING loop preempts running[-1], the victim, the latest admitted
    (scheduler.py:777-844). Each time, one short request (first in running order, always
    served) ends by EOS at its next token: its blocks let the victim, at the front of
    waiting (scheduler.py:1613), back in (with prefix caching from its own blocks, still in
    the free queue as evictable cached blocks, block_pool.py:774-805), last in running
    again, until the growth preempts it again: M + 1 preemptions of one request, with no
    cap on num_preemptions (scheduler.py:1608).

    The run is driven here on the reference (the victim's size and the EOS steps depend on
    the state it reaches) and returned as a workload; `_constructed` runs it again and
    checks the property. None when the pool is too small or too large for it."""
    m, bs, budget = env.max_preemptions, cfg.block_size, cfg.token_budget
    usable = cfg.usable_blocks - cfg.watermark_blocks
    # A running request takes at most this many blocks in one step: its token, its drafts
    # and the lookahead slots allocate_slots reserves (kv_cache_manager.py:541-571).
    k = cfg.num_spec_tokens
    per_step = 1 + -(-(k + cfg.num_lookahead_tokens) // bs)
    grow = 64
    for _ in range(8):
        prompt = cfg.max_model_len - 1 - grow
        if not cfg.enable_chunked_prefill:  # a whole prompt must fit the budget
            prompt = min(prompt, budget)
        if prompt < bs or m > 8:
            return None
        each = -(-prompt // bs)
        seats = usable // each + m + 2
        # What the victim lacks when it is back at the front of waiting: the growth of
        # every running request over the (at most 4) steps until a short request's blocks
        # are free, each step at most 1 + k tokens of it (and the lookahead once); and
        # the watermark its admission keeps free (kv_cache_manager.py:509-516).
        short_blocks = (seats * (-(-(4 * (1 + k) + cfg.num_lookahead_tokens) // bs) + 1) + 2
                        + cfg.watermark_blocks)
        longs = (usable - m * short_blocks) // each
        # Then the growth (one token per running request and step) runs the short
        # request's blocks out again.
        cycle = bs * (short_blocks + per_step * seats) // max(longs, 1) + 8
        steps = (longs + 2) * (-(-prompt // budget) + 2) + (m + 1) * cycle + 16
        if steps <= grow:
            break
        grow = 2 * steps
    else:
        return None
    short_len = short_blocks * bs
    if (longs < 1 or short_len + grow >= cfg.max_model_len or longs > _REPEAT_FILLERS
            or seats > cfg.max_num_active_reqs or seats * steps * each > _REPEAT_WORK):
        return None
    requests = [RequestSpec(id=f"r{i}", prompt_len=short_len, max_tokens=grow, arrival_step=1)
                for i in range(m)]
    # One long request fewer than the pool holds at step 1: the last one could fail its
    # full-sequence check after the others' growth and hold up everyone behind it
    # (scheduler.py:1275-1282); the rest of the pool is filled once they all decode.
    requests += [RequestSpec(id=f"r{m + i}", prompt_len=prompt, max_tokens=grow,
                             arrival_step=1) for i in range(longs - 1)]
    sched = VllmV1Scheduler(cfg)
    eos: list[EosEvent] = []
    victim = ""
    released = 0  # short requests ended so far
    pending = ""  # the short request to end at its next token
    deadline = time.monotonic() + env.timeout_s
    for step in range(1, steps + 1):
        for spec in requests:
            if spec.arrival_step == step:
                sched.add_request(spec)
        views = sched.views()
        ends: frozenset[str] = frozenset()
        if pending and any(v.request_id == pending and v.status == "RUNNING"
                           and v.num_computed_tokens >= v.num_prompt_tokens for v in views):
            ends, pending = frozenset((pending,)), ""
            eos.extend(EosEvent(id=rid, step=step) for rid in ends)
        try:
            record = sched.step(ends)
        except InputError:  # the short request did not sample in this step after all
            return None
        # Only the short requests end, by their EOS (a step later with async scheduling).
        ended = {e.id for e in eos}
        if time.monotonic() > deadline or any(rid not in ended for rid, _ in record.finished):
            return None
        held = sched.views()
        if (not victim and len(requests) == len(held) and all(
                v.status == "RUNNING" and v.num_computed_tokens >= v.num_prompt_tokens
                for v in held)):
            # Everyone decodes: a long request, or the victim sized to what is left less
            # what the running requests can take before its admission check.
            left = (record.free_blocks - per_step * (len(held) + 1) - 1
                    - cfg.watermark_blocks)
            rid = f"r{len(requests)}"
            if left >= 1:
                requests.append(RequestSpec(id=rid, prompt_len=min(left * bs, prompt),
                                            max_tokens=grow, arrival_step=step + 1))
            if left <= each:
                victim = rid if left >= 1 else held[-1].request_id
        view = sched.view(victim) if victim else None
        if view is None or victim not in record.preempted:
            continue
        if view.num_preemptions > m:
            return Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=step)
        if released < m:
            pending, released = f"r{released}", released + 1
    return None


# --- speculative decoding: hazards of the step's sizes (scheduler.py, v0.32.0) -------------

def _input_start(cfg: Config) -> int:
    """The step's input budget: max_num_batched_tokens (scheduler.py:614), the token
    budget itself before 0.28.0 (VllmRules.input_budget off: one budget)."""
    return cfg.max_num_batched_tokens if cfg.rules.input_budget else cfg.token_budget


def _room(cfg: Config) -> int:
    """The most tokens one request can get in a step: min(token budget, input budget less
    its draft slots) (scheduler.py:710-712, 1118)."""
    return min(cfg.token_budget, _input_start(cfg) - cfg.step_draft_slots)


_THRESHOLD_OFF = ("long_prefill_token_threshold is 0: nothing cuts a request padded to 1+k "
                  "(scheduler.py:1155-1156)")


def _no_padding_cut(cfg: Config) -> str | None:
    """Why no padded request is ever cut below 1+k, or None."""
    k, thr = cfg.num_spec_tokens, cfg.long_prefill_token_threshold
    if not k:
        return "no speculative decoding: no request is padded (scheduler.py:1131-1136)"
    if thr == 0:
        return _THRESHOLD_OFF
    if thr > k:
        return (f"long_prefill_token_threshold {thr} is at least 1+k = {k + 1}: it never "
                "cuts a request padded to 1+k (scheduler.py:1155-1156)")
    if _room(cfg) < k + 1:
        return (f"the padding never fits: the budget a waiting request can get is at most "
                f"min(token budget, max_num_batched_tokens - {cfg.draft_slots} draft slots) = "
                f"{_room(cfg)} < 1+k = {k + 1}, so the waiting loop stops instead of padding "
                "(scheduler.py:1118, 1149-1151)")
    if cfg.max_model_len < k + 2:
        return (f"max_model_len {cfg.max_model_len} leaves no room for 1+k+1 = {k + 2} "
                "tokens, so no request is padded (scheduler.py:1143-1148)")
    return None


def _all_drafts_fit(cfg: Config) -> str | None:
    """Why a decode's k drafts can all be scheduled, or None."""
    k = cfg.num_spec_tokens
    if not k:
        return "no speculative decoding: no drafts"
    if _room(cfg) >= k + 1:
        return (f"a decode with its k={k} drafts needs 1+k = {k + 1} tokens, within "
                f"min(token budget {cfg.token_budget}, max_num_batched_tokens - draft slots "
                f"{cfg.max_num_batched_tokens - cfg.draft_slots}) = {_room(cfg)} "
                "(scheduler.py:703-712)")
    return None


def _two_fit(cfg: Config) -> str | None:
    """Why a step can schedule two requests, or None."""
    ds, b = cfg.step_draft_slots, _input_start(cfg)
    if not cfg.num_spec_tokens:
        return "no speculative decoding: no draft slots"
    if cfg.max_num_active_reqs < 2:
        return (f"one request runs at a time anyway: max_num_active_reqs is "
                f"{cfg.max_num_active_reqs} (scheduler.py:922-924)")
    if b >= 2 * (ds + 1) and cfg.token_budget >= 2:
        return (f"two one-token requests cost 2 * (1 + {ds} draft slots) = {2 * (ds + 1)} of "
                f"the {b}-token input budget, so a step can schedule both "
                "(scheduler.py:661, 857, 918, 1367)")
    return None


def _drafts_cut(env: Envelope) -> Property:
    """A decode scheduled with fewer drafts than k, max_model_len not in the way (the
    constructed run's drafter always proposes k)."""
    def holds(ops: Ops, steps: object, t: int) -> object:
        s = steps[t]  # type: ignore[index]
        k = s.cfg.num_spec_tokens
        cut = [ops.and_(o.scheduled > 0, o.was_running, o.num_computed_tokens_before
                        >= o.prompt_len, o.spec_scheduled < k,
                        o.num_computed_tokens_before + k + 2 <= s.cfg.max_model_len)
               for o in s.slots]
        return ops.not_(ops.or_(*cut)) if cut else True
    return Property("decode_drafts_all_scheduled", "step",
                    "a decode's k drafts are all scheduled", holds)


def _one_per_step(env: Envelope) -> Property:
    """A held request gets nothing while one other request is scheduled, budget and a seat
    left."""
    def holds(ops: Ops, steps: object, t: int) -> object:
        s = steps[t]  # type: ignore[index]
        count = ops.sum([ops.to_int(o.scheduled > 0) for o in s.slots])
        idle = [ops.and_(o.held, o.scheduled == 0, ops.not_(o.finished)) for o in s.slots]
        alone = ops.and_(count == 1, ops.or_(*idle), s.token_budget_left > 0,
                         s.num_running < s.cfg.max_num_active_reqs) if idle else False
        return ops.not_(alone)
    return Property("two_requests_per_step", "step",
                    "a step with budget and a seat left serves more than one request", holds)


def _tiny(cfg: Config, *requests: tuple[int, int, int], steps: int) -> Workload:
    """A workload of (prompt_len, max_tokens, arrival_step) requests r0, r1, ..."""
    return Workload(config=cfg, requests=tuple(
        RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=m, arrival_step=a)
        for i, (p, m, a) in enumerate(requests)), steps=steps)


def _padding_cut_workload(cfg: Config, env: Envelope) -> Workload | None:
    """r0 decodes (its drafts cut to the threshold), then one-token prompts arrive: the
    first is padded to 1+k behind a scheduled running request, then cut to the threshold
    (scheduler.py:1131-1156, 1372). With the adaptive threshold enough of them arrive that
    max_num_batched_tokens // requests falls to k (650-655)."""
    k = cfg.num_spec_tokens
    n = 2
    if cfg.long_prefill_token_threshold_adaptive:
        n = cfg.max_num_batched_tokens // (k + 1) + 1
        if n > 512:
            return None
    rest = [(1, 1, 2)] * (n - 1)
    return _tiny(cfg, (1, 4, 1), *rest, steps=3)


def _drafts_cut_workload(cfg: Config, env: Envelope) -> Workload | None:
    """One request: its prompt, then a decode whose k drafts do not fit (scheduler.py:
    703-712)."""
    if cfg.max_model_len < cfg.num_spec_tokens + 4:
        return None
    return _tiny(cfg, (1, 3, 1), steps=3)


def _one_per_step_workload(cfg: Config, env: Envelope) -> Workload | None:
    """Two one-token prompts at step 1: the first costs 1 + draft slots of the input budget,
    which leaves no more than the draft slots, so the waiting loop stops (918-919)."""
    return _tiny(cfg, (1, 3, 1), (1, 3, 1), steps=2)


# The drafter's input buffers (v1/spec_decode/llm_base_proposer.py of 0.32.0; the same
# lines 110-116, 139 in 0.27.1): sized to max_num_batched_tokens (143, 185-187, 236-244),
# they take the step's scheduled tokens (gpu_model_runner.py:4984-4988, the actual tokens,
# not a padded count) plus Config.drafter_extra_slots per request (114-120, 876-879).
_DRAFTER = "llm_base_proposer.py:143, 185-187 (buffers), 114-120, 876-879 (extra slots)"


def _drafter_most(cfg: Config) -> tuple[int, str]:
    """The most query tokens a step can hand the drafter, and why: each request's tokens
    plus its extra slots."""
    net, sds, start = cfg.drafter_extra_slots or 0, cfg.step_draft_slots, _input_start(cfg)
    seats = cfg.max_num_active_reqs if cfg.rules.active_seqs_cap else cfg.max_num_seqs
    by_seats = min(cfg.token_budget, start) + net * seats
    if sds >= net and start <= by_seats:
        return start, (f"each scheduled request costs its tokens plus {sds} draft slots "
                       f"(>= the drafter's {net} extra slots) of a step's input budget of "
                       f"{start} (scheduler.py:612-614, 661, 857, 918, 1367)")
    return by_seats, (f"the scheduled tokens are at most min(token budget {cfg.token_budget}, "
                      f"input budget {start}) and at most {seats} requests run, each adding "
                      f"{net} extra slots: {by_seats}")


def _drafter_fits(cfg: Config) -> str | None:
    """Why a step's drafter input never exceeds its buffers of max_num_batched_tokens, or
    None."""
    method, b = cfg.speculative_method, cfg.max_num_batched_tokens
    if not method:
        return "no speculative decoding: no drafter"
    if method in ("ngram", "ngram_gpu", "suffix"):
        return (f"the {method} proposer sizes no buffer from max_num_batched_tokens "
                "(v1/spec_decode/ngram_proposer.py, ngram_proposer_gpu.py, "
                "suffix_decoding.py)")
    if method == "medusa":
        return (f"medusa reads one hidden state per request (medusa.py:38-56): at most "
                f"max_num_seqs {cfg.max_num_seqs} <= max_num_batched_tokens {b} "
                "(config/scheduler.py:328-333)")
    if method == "dflash":
        return (f"dflash keeps its queries in a buffer of max_num_seqs * (1 + k) "
                f"(dflash.py:40-46) and the step's context in one of max_num_batched_tokens "
                f"{b} (49-61), which the step's scheduled tokens, at most "
                f"{min(cfg.token_budget, _input_start(cfg))}, fit")
    if cfg.drafter_extra_slots is None:
        return None
    most, why = _drafter_most(cfg)
    if most <= b:
        return (f"a step hands the drafter at most {most} query tokens, within its buffers "
                f"of max_num_batched_tokens {b} ({_DRAFTER}): {why}")
    return None


def _drafter_overflow(cfg: Config) -> Property:
    """A step whose scheduled tokens plus the drafter's extra slots per scheduled request
    exceed max_num_batched_tokens, the size of the drafter's buffers."""
    net, b = cfg.drafter_extra_slots or 0, cfg.max_num_batched_tokens

    def holds(ops: Ops, steps: object, t: int) -> object:
        s = steps[t]  # type: ignore[index]
        tokens = ops.sum([o.scheduled for o in s.slots])
        served = ops.sum([ops.to_int(o.scheduled > 0) for o in s.slots])
        return tokens + net * served <= b
    return Property("drafter_input_within_buffers", "step",
                    "a step's scheduled tokens plus the drafter's extra slots per request fit "
                    "its buffers of max_num_batched_tokens", holds)


def _drafter_workload(cfg: Config, env: Envelope) -> Workload | None:
    """As many prompts as seats (at most 64) at step 1, long enough together to fill the
    token budget: the first step schedules the most tokens for the most requests."""
    seats = min(cfg.max_num_active_reqs if cfg.rules.active_seqs_cap else cfg.max_num_seqs,
                64)
    each = min(cfg.max_model_len - 1, max(1, -(-cfg.token_budget // seats)))
    return _tiny(cfg, *[(each, 2, 1)] * seats, steps=2)


_ANY_STEP_FEATURE = (ANY_FEATURE, "it follows from the config's numbers and the lines "
                     "cited, whatever else the deployment turns on")
PADDING_NOT_CUT = Argument(_no_padding_cut, holds_with=(_ANY_STEP_FEATURE,))
ALL_DRAFTS_FIT = Argument(_all_drafts_fit, holds_with=(_ANY_STEP_FEATURE,))
TWO_FIT = Argument(_two_fit, holds_with=(_ANY_STEP_FEATURE,))
DRAFTER_FITS = Argument(_drafter_fits, holds_with=(_ANY_STEP_FEATURE,))

SPEC_HAZARDS: tuple[Hazard, ...] = (
    Hazard("spec_padding_assertion", "the engine crashes: a request padded to 1+k for "
           "speculative decoding is cut by long_prefill_token_threshold <= k",
           "no_engine_assertion", lambda e: (),
           "scheduler.py:1131-1153 pads a waiting request with one token left to 1+k, "
           "1155-1156 cuts it to the threshold, and scheduler.py:1372 asserts "
           "num_new_tokens == 1 + k "
           "(vllm-project/vllm#54028)", False, PADDING_NOT_CUT,
           construct=_padding_cut_workload, construct_first=True),
    Hazard("spec_drafts_cut", "a decode's k drafts never all fit one step "
           "(max_num_batched_tokens < draft slots + 1 + k)", "", lambda e: (),
           "scheduler.py:710-712 caps a decode at the input budget less the draft slots, "
           "876 drops the drafts that did not fit", False, ALL_DRAFTS_FIT,
           construct=_drafts_cut_workload, own=_drafts_cut),
    Hazard("spec_one_request_per_step", "each step serves one request "
           "(max_num_batched_tokens < 2 * (draft slots + 1))", "", lambda e: (),
           "scheduler.py:857, 1367 charge n + draft slots to the input budget; 661, 918 stop "
           "both loops once it is at most the draft slots", False, TWO_FIT,
           construct=_one_per_step_workload, own=_one_per_step),
    Hazard("spec_drafter_buffer", "a step hands the drafter more query tokens (scheduled "
           "tokens + its extra slots per request) than its buffers of "
           "max_num_batched_tokens hold", "", lambda e: (),
           f"v1/spec_decode/{_DRAFTER}; the scheduler bounds the step's tokens "
           "(scheduler.py:612-614, 857, 1367)", False, DRAFTER_FITS,
           construct=_drafter_workload, own_cfg=_drafter_overflow),
)


# --- the hazards --------------------------------------------------------------------------

HAZARDS: tuple[Hazard, ...] = (
    Hazard("starvation", "a waiting prompt gets 0 tokens for K steps in a row",
           "starvation", lambda e: (("k", e.starvation_steps),),
           "scheduler.py:657-887 serves RUNNING first; 912 stops when the budget is spent",
           False, NO_ARGUMENT),
    Hazard("head_of_line", "a request that fits waits behind one that does not",
           "head_of_line_blocking", lambda e: (("k", e.hol_steps),),
           "scheduler.py:1160-1167, 1275-1282: any refusal of the waiting head ends "
           "admission for the step (with speculative decoding also 1141-1152: a head with "
           "one token left is refused when 1+k exceed the budget left)", True, NO_HOL,
           construct=_hol_workload,
           kv_only=lambda cfg: bool(cfg.enable_chunked_prefill) and not cfg.num_spec_tokens),
    Hazard("self_preemption", "a request that fits max_model_len can never finish "
           "(self-preemption livelock)", "never_finishes", lambda e: (),
           "kv_cache_manager.py:522-539 admits on the current sequence; scheduler.py:842-848 "
           "a request that outgrows the pool preempts itself", False, NO_SELF_PREEMPTION,
           slots=1),
    Hazard("repeated_preemption", "one request is preempted more than M times",
           "repeated_preemption", lambda e: (("m", e.max_preemptions),),
           "scheduler.py:777-844 preempts on every allocation failure, no cap on "
           "num_preemptions (1608)", True, NO_PREEMPTION, construct=_repeat_workload,
           kv_only=lambda cfg: True),
    Hazard("unchunked_blocking", "chunked prefill off: the waiting head is refused K "
           "steps for the budget running requests used", "unchunked_prefill_blocked",
           lambda e: (("k", e.unchunked_steps),),
           "scheduler.py:1160-1167 breaks when the whole prompt exceeds the budget left",
           False, CHUNKING_ON),
    Hazard("priority_inversion", "a better-priority request waits K steps while "
           "worse-priority ones hold every seat", "priority_inversion",
           lambda e: (("k", e.inversion_steps),),
           "scheduler.py:922-924 stops admission when running is full; the RUNNING loop "
           "preempts only for KV blocks (777-844)", False, NOT_PRIORITY,
           construct=_inversion_workload, min_requests=lambda cfg: cfg.max_num_active_reqs + 1),
)
HAZARDS = HAZARDS + SPEC_HAZARDS
HAZARD_NAMES: tuple[str, ...] = tuple(h.name for h in HAZARDS)


def decide_all(cfg: Config, env: Envelope, pool_known: bool, only: tuple[str, ...] = (),
               deployment: Deployment = MODEL_SCOPE, kv_premise: str = ""
               ) -> tuple[HazardResult, ...]:
    """Every hazard's verdict for `cfg` run as `deployment` (in HAZARDS order). A verdict
    that rests on the model's one full-attention KV cache group (a KV-counting argument,
    or a search of a hazard that needs the pool) ends with `kv_premise` when given."""
    return tuple(_with_kv_premise(h, decide(h, cfg, env, pool_known, deployment), kv_premise)
                 for h in HAZARDS if not only or h.name in only)


def _with_kv_premise(h: Hazard, result: HazardResult, premise: str) -> HazardResult:
    """`result` with the KV layout premise named, where the verdict rests on it."""
    rests = h.absent.kv_layout if result.verdict == ABSENT else h.needs_pool or h.absent.kv_layout
    if not premise or not rests or result.verdict == UNKNOWN_LABEL:
        return result
    return replace(result, detail=f"{result.detail}; premise: {premise}")


def decide(h: Hazard, cfg: Config, env: Envelope, pool_known: bool,
           deployment: Deployment = MODEL_SCOPE) -> HazardResult:
    """One hazard: the closed-form argument when its premises hold and it covers every
    feature the deployment turns on, else the checker, else a constructed run; a witness
    is kept only when the reference, run with the deployment's switches, fails the
    property; a verdict the model cannot give for this deployment is UNKNOWN with the
    reason."""
    start = time.monotonic()
    # The reference runs what the deployment runs, at any size: its constructed runs and
    # replays use the deployment's own switches, not the model's (which may leave the
    # prefix cache out of a search too large for the symbolic cache, _model_of).
    deployed = replace(cfg, enable_prefix_caching=deployment.prefix_caching,
                       async_scheduling=deployment.async_scheduling)
    cfg, outside = _model_of(h, cfg, env, deployment)
    on = deployment.features()
    # A speculative method outside the model leaves the Config without one: a hazard of the
    # step's speculative sizes keeps only an argument that holds for any method.
    spec_outside = tuple(f for f in outside if f.name.startswith(SPECULATIVE_DECODING.name))
    if spec_outside and h in SPEC_HAZARDS:
        if h.name == "spec_padding_assertion" and cfg.long_prefill_token_threshold == 0:
            return HazardResult(h.name, h.title, ABSENT, _THRESHOLD_OFF + _still_holds(h, on),
                                seconds=time.monotonic() - start)
        return HazardResult(h.name, h.title, UNKNOWN_LABEL, outside_reason(spec_outside),
                            seconds=time.monotonic() - start)
    broken = h.absent.broken(cfg)
    argument = None if broken else h.absent.claim(cfg)
    # A closed-form argument is derived for the synchronous Scheduler without a cache: it
    # must say why it holds with each feature the deployment turns on, modelled or not.
    uncovered = h.absent.uncovered(on)
    if argument is not None and not uncovered and (pool_known or not h.needs_pool):
        return HazardResult(h.name, h.title, ABSENT, argument + _still_holds(h, on),
                            seconds=time.monotonic() - start)
    why_not = ("; the argument that rules it out does not apply: "
               + "; ".join(p.text for p in broken)) if broken else ""
    if h.needs_pool and not pool_known:
        return HazardResult(h.name, h.title, UNKNOWN_LABEL,
                            "needs the KV pool size: give --num-gpu-blocks N (vLLM logs "
                            "it at startup as the number of GPU blocks)",
                            seconds=time.monotonic() - start)
    if any(f != PREFIX_CACHING for f in outside):
        # The model's runs are the synchronous Scheduler's: neither a witness nor a bound
        # carries over to a deployment whose scheduler decides differently.
        return HazardResult(h.name, h.title, UNKNOWN_LABEL, outside_reason(outside) + why_not,
                            seconds=time.monotonic() - start)
    if h.construct_first or h.own is not None or h.own_cfg is not None:
        shown = _constructed(h, deployed, env)
        if shown is not None or h.own is not None or h.own_cfg is not None:
            return replace(shown or HazardResult(
                h.name, h.title, UNKNOWN_LABEL, "the argument that rules it out does not "
                "apply and the constructed run on the reference did not show it" + why_not),
                seconds=time.monotonic() - start)
    result = _within_capacity(h, cfg, env) or _check(h, cfg, env)
    if h.needs_pool and result.verdict == BOUNDED:
        result = replace(result, detail=result.detail + "; " + pool_shortfall(cfg))
    if h.name == "starvation":
        result = replace(result, detail=result.detail + "; " + decode_starvation(cfg))
    if outside:  # prefix caching only: the model searched without the cache
        result = _on_deployment(h, result, deployed, env)
    if result.verdict in (BOUNDED, UNKNOWN_LABEL) and h.construct is not None:
        result = _constructed(h, deployed, env) or result
    if not pool_known and result.verdict in (WITNESSED, BOUNDED):
        result = replace(result, detail=result.detail + f"; assuming a KV pool of "
                         f"{cfg.num_gpu_blocks} blocks that never runs out (give "
                         "--num-gpu-blocks for your pool)")
    return replace(result, detail=result.detail + why_not, seconds=time.monotonic() - start)


def _model_of(h: Hazard, cfg: Config, env: Envelope,
              deployment: Deployment) -> tuple[Config, tuple[Feature, ...]]:
    """The config the model searches for this deployment (its modelled features on), and
    the features left outside the model: the unmodelled ones, and prefix caching when the
    bounded search's cache state is too large for the symbolic rules."""
    outside = deployment.outside_model()
    model = replace(cfg, enable_prefix_caching=deployment.prefix_caching,
                    async_scheduling=deployment.async_scheduling)
    if model.enable_prefix_caching and reference_only(model) is None:
        b = bounds_of(h, model, env)
        bounded = within_bounds(RuleConfig.from_config(model), b["slots"], b["depth"],
                                b["max_prompt_len"] + b["max_max_tokens"])
        # The counted cache (state.counted_cache) is not used here: a hazard's bound and
        # witness search keep the exact rules or leave the cache out, as the docs describe.
        if bounded.abstract_cache or not cache_model_fits(bounded):
            model = replace(model, enable_prefix_caching=False)
            outside = (PREFIX_CACHING, *outside)
    return model, outside


def _still_holds(h: Hazard, outside: tuple[Feature, ...]) -> str:
    """Why the argument holds with the unmodelled features on, one clause per reason."""
    reasons = dict(h.absent.holds_with)
    by_reason: dict[str, list[str]] = {}
    for f in outside:
        by_reason.setdefault(reasons.get(f.name, reasons.get(ANY_FEATURE, "")), []).append(f.name)
    return "".join(f"; with {' and '.join(names)} on too: {why}"
                   for why, names in by_reason.items())


def _switches(cfg: Config) -> str:
    """The reference's scheduling switches a run used, for a witness's detail."""
    text = (f"prefix caching {'on' if cfg.enable_prefix_caching else 'off'} and async "
            f"scheduling {'on' if cfg.async_scheduling else 'off'}")
    if cfg.num_spec_tokens:
        text = (text.replace(" and async", ", async") + " and speculative decoding "
                f"{cfg.speculative_method} k={cfg.num_spec_tokens}")
    return text


def _on_deployment(h: Hazard, result: HazardResult, deployed: Config,
                   env: Envelope) -> HazardResult:
    """A result of the model searched without the prefix cache, for a deployment that has
    it on. A witness counts only when its workload, run on the reference with the
    deployment's switches, fails the property at the same step (checker.methods.replay):
    one that preempts nothing is kept as the model found it (_with_prefix_caching says why
    it runs the same), one that preempts is replaced by that run (minimal only among the
    cache-free workloads). A bound, or a witness that does not carry over, says nothing
    of the cache: UNKNOWN (_with_prefix_caching)."""
    w = result.witness
    if result.verdict != WITNESSED or w is None:
        return _with_prefix_caching(result)
    cex = Counterexample(
        engine=ENGINE_VLLM_V1, property=h.property, params=h.params(env),
        config_name="deployed", workload=replace(w.workload, config=replace(
            w.workload.config, enable_prefix_caching=deployed.enable_prefix_caching,
            async_scheduling=deployed.async_scheduling)),
        method="reference", bounds=result.bounds, violated_at=w.violated_at, loop=w.loop,
        minimal=False)
    try:
        again = replay(cex)
    except DivergenceError as exc:
        return replace(result, verdict=UNKNOWN_LABEL, witness=None,
                       detail=outside_reason((PREFIX_CACHING,)) + " (the model found a "
                       f"witness without the cache: {result.detail}; with the deployment's "
                       f"{_switches(deployed)} the reference differs: {exc})")
    confirmed = (f"; run again on the reference with the deployment's {_switches(deployed)}: "
                 f"the same violation at step {again.violated_at}")
    kept = _with_prefix_caching(result)
    if kept.verdict == WITNESSED:
        return replace(kept, detail=kept.detail + confirmed)
    return replace(result, detail=result.detail + confirmed + " (minimal among the "
                   "workloads without the prefix cache only)",
                   witness=replace(w, workload=cex.workload, replayed=again, minimal=False))


def _with_prefix_caching(result: HazardResult) -> HazardResult:
    """A result of the model (which has no prefix cache) for a deployment whose only
    unmodelled feature is prefix caching. The model's requests share no prefix, so the
    cache finds a hit only for a preempted request looking its own blocks up again
    (scheduler.py:960-967): a witness without preemption runs the same with the cache on.
    Anything else (a bound, a witness that preempts) says nothing of shared prefixes."""
    w = result.witness
    if result.verdict == WITNESSED and w is not None and not any(
            rec.preempted for rec in w.replayed.records[: w.violated_at]):
        return replace(result, detail=result.detail + "; with prefix caching on it runs the "
                       "same: its requests share no prefix and none is preempted")
    return replace(result, verdict=UNKNOWN_LABEL, witness=None,
                   detail=outside_reason((PREFIX_CACHING,)) + f" (the model found: "
                   f"{result.verdict}: {result.detail})")


def _within_capacity(h: Hazard, cfg: Config, env: Envelope) -> HazardResult | None:
    """A hazard that cannot occur within the bound, decided without a search: it needs
    more requests than the bound has, or (KV-only) the bound's requests cannot exhaust
    the pool (capacity lemma)."""
    bounds = bounds_of(h, cfg, env)
    need = h.min_requests(cfg)
    if bounds["slots"] < need:
        return HazardResult(h.name, h.title, BOUNDED, f"no witness with {bounds['slots']} "
                            f"request(s): it needs at least {need}", tuple(bounds.items()))
    if not h.kv_only(cfg):
        return None
    lemma = capacity_lemma(cfg, requests=bounds["slots"])
    if lemma is None:
        return None
    return HazardResult(h.name, h.title, BOUNDED, f"no witness with {bounds['slots']} "
                        f"request(s) over any number of steps: {lemma}", tuple(bounds.items()))


def bounds_of(h: Hazard, cfg: Config, env: Envelope) -> dict[str, int]:
    """The BMC bounds of one hazard's query."""
    top = cfg.max_model_len - 1
    # max_tokens is read only by the stop check (sched/utils.py:114-119): within `depth`
    # steps a request samples at most `depth` tokens, so any max_tokens above depth + 1
    # behaves as depth + 1 and the default bound loses no witness.
    tokens = env.max_max_tokens or min(top, env.depth + 1)
    return {"slots": h.slots or env.slots, "depth": env.depth,
            "max_prompt_len": min(env.max_prompt_len or top, top),
            "max_max_tokens": tokens, "max_priority": env.max_priority}


def _check(h: Hazard, cfg: Config, env: Envelope) -> HazardResult:
    """The checker's verdict on the hazard's property within the bounds: BMC on the
    symbolic rules (with speculative decoding, sync or async, BMC chooses the drafts
    accepted and proposed as the environment)."""
    bounds = bounds_of(h, cfg, env)
    nc = with_bounds(custom_config("user", cfg, validated=True), **bounds)
    # Mamba's align mode is in the reference only: its explorer searches the same bounds.
    method = "bmc" if reference_only(cfg) is None else "explore"
    job = Job(engine=ENGINE_VLLM_V1, property=h.property, params=h.params(env), config=nc,
              expected=None, timeout_s=env.timeout_s, method=method, explorer="reference")
    result = from_job(h, run(job), bounds)
    if method == "explore":
        result = replace(result, detail=result.detail + "; searched by the reference "
                         "explorer within the bounds (Mamba's align mode is in the reference "
                         "only, model/vllm/align_cache.py: the rules do not run it)")
    return result


def from_job(h: Hazard, res: JobResult, bounds: dict[str, int]) -> HazardResult:
    """A job's verdict in hazard terms. A proof over a fixed number of request slots is
    not a proof for every number of requests, so it is reported within bounds."""
    v = res.verdict
    bt = tuple(bounds.items())
    if v.verdict == VIOLATED and res.counterexample is not None and res.replayed is not None:
        cex = res.counterexample
        how = (f"minimal trace found by {v.method}, replayed on the reference"
               if cex.minimal else f"trace found by {v.method}: {v.detail}")
        return HazardResult(h.name, h.title, WITNESSED, how, bt,
                            Witness(cex.workload, res.replayed, cex.violated_at, cex.minimal,
                                    cex.loop))
    if v.verdict == PROVED:
        return HazardResult(h.name, h.title, BOUNDED,
                            f"no witness with {bounds['slots']} request(s) over any number of "
                            f"steps ({v.detail})", bt)
    if v.verdict == HOLDS:
        return HazardResult(h.name, h.title, BOUNDED,
                            f"no witness with {bounds['slots']} request(s) in {v.depth} steps"
                            f" (prompts <= {bounds['max_prompt_len']}, max_tokens <= "
                            f"{bounds['max_max_tokens']})", bt)
    assert v.verdict == UNKNOWN
    return HazardResult(h.name, h.title, UNKNOWN_LABEL, v.detail or "solver unknown", bt)


def _constructed(h: Hazard, cfg: Config, env: Envelope) -> HazardResult | None:
    """Run the hazard's constructed workload on the reference and check the property
    there; a witness only if the property fails on the reference."""
    assert h.construct is not None
    # The run is as long as the pool takes to fill: on a large pool it is bounded by the
    # hazard's time limit like a search (a construction driven on the reference included),
    # and a run cut short shows nothing.
    deadline = time.monotonic() + env.timeout_s
    workload = h.construct(cfg, env)
    if workload is None:
        return None
    prop = h.prop(env, cfg)
    records = []
    for _, record in iter_steps(workload):
        records.append(record)
        if time.monotonic() > deadline:
            return None
    steps = records_to_steps(workload, tuple(records))
    failing = [t for t in range(len(steps)) if not prop.holds(CONCRETE, steps, t)]
    if not failing:
        return None
    at = failing[0] + 1
    shown = max(1, at - 5)
    how = (f"needs {len(workload.requests)} requests, more than the checker's bound of "
           f"{env.slots}: a constructed run" if h.own is None and h.own_cfg is None
           and not h.construct_first else
           f"{h.upstream}: a constructed run of {len(workload.requests)} request(s)")
    return HazardResult(
        h.name, h.title, WITNESSED, how + f", checked on the reference with "
        f"{_switches(workload.config)} (the deployment's switches), not minimised"
        + _preemptions(records[:at]),
        (), Witness(workload, ReplayResult(tuple(records), at), at, False, first_shown=shown))


def _preemptions(records: list[StepRecord]) -> str:
    """Who was preempted more than once in a run, when, and how it came back (with the
    prefix cache hit it resumed from, kv_cache_manager.py:268-300), for a witness's detail."""
    out = ""
    for rid in dict.fromkeys(r for rec in records for r in rec.preempted):
        at = [rec.step for rec in records if rid in rec.preempted]
        if len(at) < 2:
            continue
        back = []
        for rec in records:
            if rid in rec.resumed:
                hits = dict(rec.extra).get("prefix_hits")
                hit = hits.get(rid, 0) if isinstance(hits, dict) else 0
                back.append(f"{rec.step}" + (f" (from a prefix cache hit of {hit} tokens)"
                                             if hit else ""))
        out += (f"; {rid} is preempted at steps {', '.join(map(str, at))}"
                + (f" and resumed at step{'s' if len(back) > 1 else ''} {', '.join(back)}"
                   if back else ""))
    return out
