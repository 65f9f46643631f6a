"""Request kinds a search may leave out, where z3 proves that the kinds it keeps do
everything the others do.

**max_tokens under EOS.** A request's `max_tokens` steers a step only where it stops the
request by length. Where EOS may be sampled on any token, the same request with the
menu's largest `max_tokens` can stop at that token by EOS instead, and the step is the
same but for what it reports of the two: `SlotObs.max_tokens` and `finished_stop`. So
for a property that reads neither, the menu's kinds with a smaller `max_tokens` add no
state the search does not reach from their largest-`max_tokens` twins, up to those two
reports, and no verdict; the search may start requests of the twins only. That is a
simulation between the two spaces, step for step, so a violation is found at the same
depth in both.

The least counterexample (checker/methods/minimize.py's order: fewest requests, then per
request arrival step, prompt_len, max_tokens, ..., then EOS choices) samples no EOS: read
backwards, the same fact lowers any violating run to one where each request's max_tokens
is the number of outputs it stopped at (by EOS or by length), or one more than it had at
the end if it did not stop, and no EOS at all. That run has the same observables but those
two reports, so it violates at the same depth, and it is no greater in the order (every
max_tokens no larger, no EOS bit). So the caller searches the whole menu again to the
depth of the violation without EOS, for the least counterexample.

The fact, for every state (no invariant assumed), every request kind and EOS choice and
every slot i (z3, at min(slots, PROOF_SLOTS) slots, like analysis.py's proofs: the rules
are folds over slots with one code for every slot):
`step(s, specs, eos)` and `step(s, specs[i].max_tokens raised, eos[i] or finished_i)` have
the same next state and the same observables but those two, and the EOS added is on a
slot that samples a token in that step (so it is one of the choices the search
enumerates). Applied slot by slot, it maps every run of the full menu onto a run of the
twins with the same observables, and the twins' runs are runs of the full menu.

vLLM V1's synchronous rules satisfy it: they read `max_tokens` only in the stop check
after sampling (model/vllm/rules.py, `check_stop`, sched/utils.py:98-119 upstream). The
AsyncScheduler's do not (a running request with an output in flight is not scheduled
past the last token max_tokens allows, scheduler.py:664-677 upstream, and its EOS is
chosen a step before its stop), and with speculative decoding max_tokens caps the
accepted tokens: there the proof fails and the full menu is searched.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import z3

import checker.methods.array.analysis as analysis
import checker.methods.array.pool as pool
from checker.methods import proof_cache
from checker.methods.array.analysis import PROOF_SLOTS
from checker.methods.array.layout import leaves_of
from checker.methods.explore import Kind
from model.core.engine import EngineModel
from model.core.ops import SymbolicOps

# The most paged-pool entries (blocks x table entries per slot) at which the proof is
# attempted: with prefix caching, a 3 x 4 pool proves in 1.2 s, a 5 x 4 one in 10 s and
# near PROOF_RLIMIT (311 million units of 400, 2026-12-06); larger pools would pay the
# whole limit on a first run for no answer, so they keep the full menu.
POOL_LIMIT = 20
# What the twins report differently: a property reading either keeps the full menu.
MAX_TOKENS_READS = frozenset({"max_tokens", "finished_stop"})


def max_tokens_twins(kinds: Sequence[Kind]) -> list[Kind] | None:
    """The kinds of `kinds` with its largest max_tokens M, in menu order, when the menu
    holds each of them with every max_tokens 1..M and nothing else (so every kind has its
    twin, and every run lowers to one of the menu, module docstring) and M > 1; else None
    (nothing to leave out, or a menu the argument does not cover)."""
    if not kinds:
        return None
    top = max(k.max_tokens for k in kinds)
    twins = [k for k in kinds if k.max_tokens == top]
    lowered = {replace(k, max_tokens=m) for k in twins for m in range(1, top + 1)}
    if top <= 1 or lowered != set(kinds):
        return None
    return twins


def max_tokens_merged(engine: EngineModel | str, rule_cfg: Any, slots: int) -> bool:
    """Whether raising a request's max_tokens, with EOS where the smaller one stopped it,
    changes nothing of a step but its reports of max_tokens and finished_stop (z3, see the
    module docstring; stored like analysis.py's proofs)."""
    return _merged(analysis._engine(engine), rule_cfg, slots)


@functools.lru_cache(maxsize=64)
def _merged(key: Any, rule_cfg: Any, slots: int) -> bool:
    if analysis._parts(key.model, rule_cfg):
        return False  # diff's product: its sides' kinds are one kind
    lay = pool.layout_of(leaves_of(key.model.initial_state(2, rule_cfg)))
    if lay is not None and lay.blocks * lay.table_len > POOL_LIMIT:
        return False
    name = proof_cache.key("array-max-tokens", key.name, rule_cfg, slots, analysis._limit())
    loaded = proof_cache.load(name)
    if loaded is not None:
        analysis._read_undecided(loaded)
        return bool(loaded["merged"])
    n = max(1, min(slots, PROOF_SLOTS))
    before, unlimited = analysis._undecided, analysis._unlimited
    a = analysis._Analyser(key.model, rule_cfg, n)
    answer = all(analysis._solve_unsat(_raised_facts(a, i)) for i in range(n))
    analysis._store(name, {"merged": answer}, before, unlimited)
    return answer


def _raised_facts(a: Any, i: int) -> list[Any]:
    """Satisfiable where raising slot i's max_tokens (EOS added where it stopped) changes
    the step beyond the two reports, or adds EOS to a slot that samples nothing."""
    s = a.fresh("s", 2)
    specs = analysis._symbolic_specs("p", a.n)
    eos = [z3.Bool(f"e{k}") for k in range(a.n)]
    raised = z3.Int("raised_max_tokens")
    ops = _SharedNames()
    n1, o1 = a.engine.step(ops, a.cfg, specs, s, eos)
    stopped = o1.slots[i].finished
    eos2 = list(eos)
    eos2[i] = z3.Or(eos[i], stopped)
    specs2 = list(specs)
    specs2[i] = replace(specs[i], max_tokens=raised)
    n2, o2 = a.engine.step(ops, a.cfg, specs2, s, eos2)
    fields = [f for f in analysis._OBS_FIELDS if f not in MAX_TOKENS_READS]
    diff = [analysis._differs(x, y) for x, y in zip(analysis._outputs(n1, o1, fields),
                                                    analysis._outputs(n2, o2, fields),
                                                    strict=True)
            if not (_plain(x) and _plain(y) and x == y)]
    diff.append(z3.And(stopped, z3.Not(eos[i]), z3.Not(o1.slots[i].sampled)))
    return [raised >= specs[i].max_tokens, specs[i].max_tokens >= 1,
            *ops.take_definitions(), z3.Or(*diff)]


class _SharedNames(SymbolicOps):
    """SymbolicOps that give one term one name however often it is named, so that the
    two steps of the query share every intermediate value they compute alike (all of the
    scheduling, which does not read max_tokens): z3 then compares only what differs,
    where two copies under different names took it minutes (prefix caching's pool)."""

    def __init__(self) -> None:
        super().__init__()
        self._names: dict[int, tuple[Any, Any]] = {}

    def name(self, value: Any) -> Any:
        """The constant already naming `value`, else a fresh one."""
        if not isinstance(value, z3.ExprRef) or z3.is_const(value):
            return value
        known = self._names.get(value.get_id())
        if known is None:
            known = (value, super().name(value))  # the term kept: its id stays its own
            self._names[value.get_id()] = known
        return known[1]


def _plain(x: Any) -> bool:
    return not isinstance(x, z3.ExprRef)
