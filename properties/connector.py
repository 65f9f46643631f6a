"""KV connector properties, read from the reference's records (model/vllm/connector.py),
and two of them over Ops for the methods (the end of this module; the symbolic rules'
connector is model/vllm/connector_rules.py). On the records, as the conformance harness
reads them: a request
waiting for its asynchronous KV load is one listed waiting with computed tokens that it
was never scheduled (scheduler.py:1320-1341 sets them before the load), and it holds the
blocks of those tokens (one full-attention group).

- `waits_behind_loads`: a request that would fit the pool alone waits K steps in a row,
  unscheduled, while such loads hold blocks (the hazard `kv_load_blocks_admission`).
  A liveness property in disguise: with loads that never end it is VIOLATED for any K
  once the loads fill the pool; under a premise that every load ends within K steps it
  is not decided here (the loaded requests are then admitted ahead of the waiting queue,
  scheduler.py:913-917, and free their blocks only when they finish).
- `never_admitted_after_load`: a request blocked on its load for a whole run (the
  liveness property "a request blocked on a load forever"). VIOLATED whenever the
  environment may never end a load. Under the fairness premise that every load ends within
  K steps it HOLDS on the bounded family tests/test_connector.py enumerates (1-2 requests,
  prompts of 1-5 tokens, every hit, loads ending within 2 steps; 640 and 5760 runs), with
  one exception the engine has: a 1-token prompt whose one token the connector offers
  asynchronously every time is cut to 0 after each load (scheduler.py:3171-3172), looks
  new, and starts another load in the same pass (960-1042), forever.
- `zero_tokens_after_load`: a request admitted after its load is scheduled at least one
  token. The engine cuts a load of every token one short (scheduler.py:3171-3172), so it
  holds on every run of the reference; a synchronous hit of the whole prompt is not cut
  and reaches `assert num_new_tokens > 0` (scheduler.py:1170) instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from model.core.ops import Bool, Ops
from model.core.types import Step, StepRecord, Workload
from properties.catalogue import Property


def loading_ids(records: Sequence[StepRecord]) -> list[set[str]]:
    """For each step, the requests waiting for a KV load after its schedule: listed
    waiting with computed tokens and not scheduled since they got them."""
    out: list[set[str]] = []
    loading: set[str] = set()
    for rec in records:
        computed = dict(rec.num_computed_tokens)
        started = {rid for rid in rec.waiting if computed.get(rid, 0) > 0}
        served = {rid for rid, n in rec.scheduled if n > 0}
        loading = (loading | started) - served - {rid for rid, _ in rec.finished}
        loading &= set(rec.waiting)
        out.append(set(loading))
    return out


def waits_behind_loads(workload: Workload, records: Sequence[StepRecord], k: int
                       ) -> int | None:
    """The first step (1-based) at which a request that fits the pool alone has waited K
    steps in a row unscheduled, with nothing computed, while loads held blocks; None if
    no step does."""
    cfg = workload.config
    fits = {r.id for r in workload.requests
            if -(-r.prompt_len // cfg.block_size) <= cfg.usable_blocks}
    streak: dict[str, int] = {}
    for rec, loading in zip(records, loading_ids(records), strict=True):
        computed = dict(rec.num_computed_tokens)
        scheduled = {rid for rid, n in rec.scheduled if n > 0}
        for rid in rec.waiting:
            blocked = (rid in fits and rid not in loading and rid not in scheduled
                       and computed.get(rid, 0) == 0 and bool(loading))
            streak[rid] = streak.get(rid, 0) + 1 if blocked else 0
            if streak[rid] >= k:
                return rec.step
        for rid in set(streak) - set(rec.waiting):
            del streak[rid]
    return None


def zero_tokens_after_load(records: Sequence[StepRecord]) -> int | None:
    """The first step at which a request admitted after its KV load is scheduled 0
    tokens (or the engine asserts so); None if none is."""
    before: set[str] = set()
    for rec, loading in zip(records, loading_ids(records), strict=True):
        scheduled = dict(rec.scheduled)
        for rid in (*rec.admitted, *rec.resumed):
            if rid in before and scheduled.get(rid, 0) == 0:
                return rec.step
        before = loading
    return None


def never_admitted_after_load(records: Sequence[StepRecord]) -> str | None:
    """A request that started a KV load and was neither admitted (or resumed) nor finished
    by the run's last step: blocked on its load for the whole run (the liveness property
    "a request blocked on a load forever", read on a run long enough for every other
    request to finish). Returns its id, or None."""
    started: dict[str, int] = {}
    for rec, loading in zip(records, loading_ids(records), strict=True):
        for rid in loading:
            started.setdefault(rid, rec.step)
        for rid in (*rec.admitted, *rec.resumed, *(r for r, _ in rec.finished)):
            started.pop(rid, None)
    return min(started, key=lambda rid: (started[rid], rid)) if started else None


# --- over Ops, for the methods (model/vllm/rules.py has the connector; connector_rules.py)


def _load_admission_scheduled(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
    """A request admitted (or resumed) after its KV load, with the tokens it loaded
    computed, is scheduled at least one token: a load of every token is cut one short
    (scheduler.py:3171-3172), so `assert num_new_tokens > 0` (1170) never fails after a
    load."""
    return _all(ops, [ops.implies(ops.and_(ops.or_(o.admitted, o.resumed),
                                           o.num_computed_tokens_before > 0), o.scheduled > 0)
                      for o in steps[t].slots])


def _blocked_after_load(ops: Ops, s: Step, i: int) -> Bool:
    """Slot i is listed waiting after the step's schedule with computed tokens it was not
    scheduled with: waiting for its KV load, or back from it and not admitted."""
    o = s.slots[i]
    return ops.and_(o.waiting_after, o.num_computed_tokens > 0, o.scheduled == 0)


def make_never_admitted_after_load(k: int) -> Property:
    """No request stays blocked on its KV load (waiting with the tokens it loads, never
    scheduled) for k steps in a row: the bounded reading of "a request blocked on a load
    forever". With loads the environment may never report it fails for every k: the load
    holds its request WAITING_FOR_REMOTE_KVS until finished_recving names it
    (scheduler.py:929-932, 3175-3193; no time-out in the scheduler)."""
    def holds(ops: Ops, steps: Sequence[Step], t: int) -> Bool:
        if t < k - 1:
            return True
        return ops.not_(_any(ops, [
            _all(ops, [_blocked_after_load(ops, steps[u], i) for u in range(t - k + 1, t + 1)])
            for i in range(len(steps[t].slots))]))
    return Property("never_admitted_after_load", "window",
                    f"no request stays blocked on its KV load for {k} steps in a row", holds,
                    window=k, params=(("k", k),))


def _all(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.and_(*xs) if xs else True


def _any(ops: Ops, xs: Sequence[Bool]) -> Bool:
    return ops.or_(*xs) if xs else False


PROPERTIES: tuple[Property, ...] = (
    Property("zero_tokens_after_load", "step", _load_admission_scheduled.__doc__ or "",
             _load_admission_scheduled),
)
FACTORIES = {"never_admitted_after_load": make_never_admitted_after_load}
