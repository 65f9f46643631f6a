"""The property catalogue: every property is written over Ops and the Step observables only,
so one property serves every engine and both checking methods.

A property is either
- `step`: must hold at every step (it reads `steps[t]`, sometimes `steps[t-1]`);
- `window`: bounded liveness over the last `window` steps (`steps[t-window+1 .. t]`);
- `lasso`: a request that never finishes on an infinite run (a reachable cycle).
`holds(ops, steps, t)` returns the Bool "the property holds at step index t".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from model.core.modules import optional_module
from model.core.ops import Bool, Int, Ops
from model.core.types import SlotObs, Step

Holds = Callable[[Ops, Sequence[Step], int], Bool]


@dataclass(frozen=True, slots=True)
class Property:
    """A named property with its kind and evaluation function."""

    name: str
    kind: str  # "step" | "window" | "lasso"
    description: str
    holds: Holds
    window: int = 1
    params: tuple[tuple[str, int], ...] = field(default_factory=tuple)


def _count(ops: Ops, flags: Sequence[Bool]) -> Int:
    return ops.sum([ops.to_int(f) for f in flags])


def _all(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.and_(*xs) if xs else True


def _any(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.or_(*xs) if xs else False


def _joined(o: SlotObs, ops: Ops) -> Bool:
    return ops.or_(o.admitted, o.resumed)


# --- safety ---------------------------------------------------------------------------

def budget_respected(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """The tokens scheduled in a step never exceed the token budget (scheduler.py:1404-1408)."""
    s = steps[t]
    total = ops.sum([o.scheduled for o in s.slots])
    return ops.and_(total <= s.cfg.token_budget, s.token_budget_left >= 0)


def running_within_max_num_seqs(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """`running` never holds more than max_num_seqs requests (scheduler.py:1411)."""
    s = steps[t]
    return s.num_running <= s.cfg.max_num_seqs


def kv_blocks_conserved(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Free blocks plus blocks held equal the usable pool, a block shared by several
    requests (prefix caching) counted once; nothing is over-allocated."""
    s = steps[t]
    held = ops.sum([o.blocks for o in s.slots]) - s.shared_blocks
    return ops.and_(s.free_blocks >= 0, s.shared_blocks >= 0,
                    s.free_blocks + held == s.cfg.usable_blocks,
                    s.free_blocks_end <= s.cfg.usable_blocks)


def computed_within_tokens(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """num_computed_tokens <= num_tokens, and no request is scheduled past what it lacks."""
    return _all(ops, [
        ops.and_(o.num_computed_tokens <= o.num_tokens,
                 o.scheduled <= o.num_tokens - o.num_computed_tokens_before)
        for o in steps[t].slots])


def no_admission_after_preemption(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """No request is admitted or resumed in a step that preempted (scheduler.py:900)."""
    s = steps[t]
    return ops.implies(s.any_preempted, _all(ops, [ops.not_(_joined(o, ops)) for o in s.slots]))


def preempted_requeued(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A preempted request has num_computed_tokens 0 and waits at the head of the queue
    (FCFS, request_queue.py:92-94) or in (priority, arrival_time) order (PRIORITY,
    request_queue.py:159-164)."""
    s = steps[t]
    slots = s.slots
    reset = _all(ops, [ops.implies(o.preempted, o.num_computed_tokens == 0) for o in slots])
    if s.cfg.policy_priority:
        order = _all(ops, [
            ops.implies(ops.and_(p.waiting_after, q.waiting_after, p.queue_key < q.queue_key),
                        ops.or_(p.priority < q.priority,
                                ops.and_(p.priority == q.priority,
                                         p.arrival_time < q.arrival_time)))
            for p in slots for q in slots if p is not q])
    else:
        order = _all(ops, [
            ops.implies(ops.and_(p.preempted, q.waiting_after, ops.not_(q.preempted)),
                        p.queue_key < q.queue_key)
            for p in slots for q in slots if p is not q])
    return ops.and_(reset, order)


def whole_prompt_without_chunking(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """With chunked prefill off, a waiting request is scheduled whole or not at all: all
    it lacks beyond its prefix-cache hit."""
    s = steps[t]
    whole = _all(ops, [ops.implies(_joined(o, ops),
                                   o.scheduled == o.num_tokens - o.prefix_hit)
                       for o in s.slots])
    return ops.or_(s.cfg.enable_chunked_prefill, whole)


def admitted_with_tokens(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A request admitted or resumed gets at least one token to compute: a prefix-cache
    hit never covers the whole sequence (`assert num_new_tokens > 0`, scheduler.py:1170;
    the hit is capped at num_tokens - 1, kv_cache_manager.py:289-300)."""
    return _all(ops, [ops.implies(_joined(o, ops), o.scheduled >= 1) for o in steps[t].slots])


def sampled_within_max_model_len(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A scheduled request's sampled token still has a position below max_model_len: its
    tokens computed after scheduling plus the one sampled fit (scheduler.py:714-721 caps a
    running request at max_model_len - num_computed_tokens - 1; 1141-1146 pads only with
    room; vllm-project/vllm#53962, #53812 "Sampled token IDs exceed the max model length")."""
    s = steps[t]
    return _all(ops, [ops.implies(o.scheduled > 0,
                                  o.num_computed_tokens + 1 <= s.cfg.max_model_len)
                      for o in s.slots])


def no_engine_assertion(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """The engine never reaches one of its own assertions: a crash of the serving process,
    e.g. vLLM's `assert num_new_tokens == 1 + num_spec_tokens` (scheduler.py:1372), reached
    when a long-prefill threshold below 1+k cuts a request padded for speculative decoding
    (vllm-project/vllm#54028)."""
    return ops.not_(steps[t].assertion)


def resumed_recomputes_all(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A resumed request starts again from nothing: preemption freed its blocks
    (scheduler.py:1589-1593). With prefix caching it may hit its own blocks, still cached
    unless evicted, and come back cheaper (960-967, block_pool.py:774-805)."""
    return _all(ops, [ops.implies(o.resumed, o.prefix_hit == 0) for o in steps[t].slots])


def prefix_hit_whole_blocks(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A prefix-cache hit is a whole number of blocks below the request's length
    (single_type_kv_cache_manager.py:733-828, kv_cache_manager.py:289-300)."""
    bs = getattr(steps[t].cfg, "block_size", 1)  # engines without blocks hit nothing
    return _all(ops, [ops.implies(_joined(o, ops), ops.and_(
        o.prefix_hit >= 0, o.prefix_hit <= o.num_tokens - 1,
        ops.floordiv(o.prefix_hit, bs) * bs == o.prefix_hit)) for o in steps[t].slots])


def running_before_waiting(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Every running request served in a step is served before every waiting request
    admitted in it (scheduler.py:657, 899-900)."""
    slots = steps[t].slots
    return _all(ops, [
        ops.implies(ops.and_(r.was_running, r.scheduled > 0, _joined(w, ops)),
                    r.serve_rank < w.serve_rank)
        for r in slots for w in slots if r is not w])


def _running_decodes(ops: Ops, s: Step) -> Int:
    return _count(ops, [ops.and_(o.was_running,
                                 o.num_tokens - o.num_computed_tokens_before == 1)
                        for o in s.slots])


def decodes_exhaust_budget(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Seed 000's theorem: when the running decodes D use at least the budget B (D >= B,
    one token each), a waiting request gets 0 tokens in that step."""
    s = steps[t]
    starved = _all(ops, [ops.implies(o.was_waiting, o.scheduled == 0) for o in s.slots])
    return ops.implies(_running_decodes(ops, s) >= s.cfg.token_budget, starved)


def exhausting_decodes_fill_max_num_seqs(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Companion to the seed theorem: D >= B can only happen with D = B = max_num_seqs."""
    s = steps[t]
    d = _running_decodes(ops, s)
    return ops.implies(d >= s.cfg.token_budget,
                       ops.and_(d == s.cfg.token_budget, d == s.cfg.max_num_seqs))


# --- bounded liveness (windows) ---------------------------------------------------------

def _starving(ops: Ops, steps: Sequence[Step], t: int, k: int, i: int) -> Bool:
    return _all(ops, [ops.and_(steps[u].slots[i].was_waiting, steps[u].slots[i].scheduled == 0)
                      for u in range(t - k + 1, t + 1)])


def make_starvation(k: int) -> Property:
    """A waiting request never gets 0 tokens for k consecutive steps."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        if t < k - 1:
            return True
        return ops.not_(_any(ops, [_starving(ops, steps, t, k, i)
                                   for i in range(len(steps[t].slots))]))
    return Property("starvation", "window", f"no waiting request gets 0 tokens for {k} "
                    "consecutive steps", holds, window=k, params=(("k", k),))


def make_preemption_storm(m: int) -> Property:
    """No request is preempted more than m times."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        return _all(ops, [o.num_preemptions <= m for o in steps[t].slots])
    return Property("preemption_storm", "step", f"no request is preempted more than {m} times",
                    holds, params=(("m", m),))


def _fits_alone(ops: Ops, s: Step, o: SlotObs) -> Bool:
    need = ops.cdiv(ops.min(o.num_tokens, s.cfg.max_model_len), s.cfg.block_size)
    return ops.and_(need + s.cfg.watermark_blocks <= s.free_blocks_end,
                    o.num_tokens <= s.cfg.token_budget)


def make_head_of_line(k: int) -> Property:
    """A waiting request whose whole sequence fits the free blocks and the budget is never
    left waiting for k consecutive steps behind a request that does not fit."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        if t < k - 1:
            return True
        blocked = []
        for i in range(len(steps[t].slots)):
            each = []
            for u in range(t - k + 1, t + 1):
                s = steps[u]
                o = s.slots[i]
                each.append(ops.and_(o.was_waiting, o.scheduled == 0,
                                     ops.not_(s.any_preempted), _fits_alone(ops, s, o)))
            blocked.append(_all(ops, each))
        return ops.not_(_any(ops, blocked))
    return Property("head_of_line", "window", "a waiting request that fits is never held for "
                    f"{k} consecutive steps behind one that does not", holds, window=k,
                    params=(("k", k),))


def _never_finishes(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """Lasso property: evaluated by the checker on a loop; see checker/methods/bmc.py."""
    return True


def _step_property(holds: Holds) -> Property:
    """A step property named after its function, described by its docstring."""
    return Property(holds.__name__, "step", holds.__doc__ or "", holds)


SAFETY: tuple[Property, ...] = tuple(_step_property(f) for f in (
    budget_respected, running_within_max_num_seqs, kv_blocks_conserved,
    computed_within_tokens, no_admission_after_preemption, preempted_requeued,
    whole_prompt_without_chunking, running_before_waiting, decodes_exhaust_budget,
    exhausting_decodes_fill_max_num_seqs, admitted_with_tokens, prefix_hit_whole_blocks,
    resumed_recomputes_all, no_engine_assertion, sampled_within_max_model_len,
))

NEVER_FINISHES = Property(
    "never_finishes", "lasso",
    "a request that fits max_model_len is never left unfinished forever (livelock)",
    _never_finishes)

_FACTORIES: dict[str, Callable[..., Property]] = {
    "starvation": make_starvation,
    "preemption_storm": make_preemption_storm,
    "head_of_line": make_head_of_line,
}


# Modules with engine-specific or hazard properties; each defines PROPERTIES (a tuple of
# Property) and may define FACTORIES (name -> factory taking the parameters).
EXTRA_MODULES = ("properties.hazards", "properties.sglang", "properties.mistralrs",
                 "properties.baselines", "properties.connector")


def _extras() -> tuple[tuple[Property, ...], dict[str, Callable[..., Property]]]:
    props: list[Property] = []
    factories: dict[str, Callable[..., Property]] = {}
    for module in EXTRA_MODULES:
        mod = optional_module(module)
        if mod is None:
            continue
        props += getattr(mod, "PROPERTIES", ())
        factories.update(getattr(mod, "FACTORIES", {}))
    return tuple(props), factories


def names() -> tuple[str, ...]:
    """Every property name."""
    extra, factories = _extras()
    return (tuple(p.name for p in SAFETY + extra) + tuple(_FACTORIES) + tuple(factories)
            + (NEVER_FINISHES.name,))


def get(name: str, **params: int) -> Property:
    """The property `name`, instantiated with its parameters (k, m). Every property but
    no_engine_assertion and admitted_with_tokens holds vacuously once the engine has
    reached an assertion of its own: a crashed engine has no later behaviour to judge."""
    return _after_crash_vacuous(_get(name, **params))


def _get(name: str, **params: int) -> Property:
    extra, factories = _extras()
    for p in SAFETY + extra:
        if p.name == name:
            return p
    if name == NEVER_FINISHES.name:
        return NEVER_FINISHES
    if name in _FACTORIES:
        return _FACTORIES[name](**params)
    if name in factories:
        return factories[name](**params)
    raise KeyError(name)


# Properties judged at the crash step too. admitted_with_tokens is the engine's own
# `assert num_new_tokens > 0` (scheduler.py:1170), which the engine reaches exactly when it
# is about to admit or resume a request with 0 tokens: that step is a crash, observed with
# that request joined with 0 tokens (model/vllm/rules.py `_slot_obs`, model/vllm/engine.py
# `_crashed`), so the property is VIOLATED exactly where the engine
# reaches the assertion. Nothing else joins in a crash step (it is observed as the crash
# record has it: nothing done) or after it (a dead engine admits nothing), so the property
# needs no guard, and its definition stays the one its theorem proves.
_JUDGE_THE_CRASH = ("no_engine_assertion", "admitted_with_tokens")


def _after_crash_vacuous(prop: Property) -> Property:
    if prop.name in _JUDGE_THE_CRASH or prop.kind == "lasso":
        return prop
    inner = prop.holds

    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        crashed = steps[t].assertion
        if crashed is False:  # engines and configs without assertions: no extra term
            return inner(ops, steps, t)
        return ops.or_(crashed, inner(ops, steps, t))
    holds.__wrapped__ = inner  # type: ignore[attr-defined]  # inspect.unwrap finds the definition
    return replace(prop, holds=holds)


def example(name: str) -> Property:
    """The property `name` with every parameter a factory requires set to 2 (for tests and
    listings that need an instance of each property)."""
    _, factories = _extras()
    factory = {**_FACTORIES, **factories}.get(name)
    if factory is None:
        return get(name)
    required = [p.name for p in inspect.signature(factory).parameters.values()
                if p.default is inspect.Parameter.empty]
    return factory(**{p: 2 for p in required})
