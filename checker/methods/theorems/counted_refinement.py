"""The counted prefix cache (model/vllm/abstract_cache.py) refines the exact one
(model/vllm/cache_rules.py): a z3 proof per rule, at the sizes of `SIZES` (one and two
request slots, every table length the exact symbolic cache carries, pools up to 4
blocks, block sizes 1, 2 and 4).

The claim is a simulation. `_related` is a relation between an exact pool with its block
tables and the counted pool over the same slots (their blocks held, `w.blocks`, are the
rules' own, shared by both): the counts are the exact pool's (blocks in use = blocks with
ref_cnt > 0, table positions = the slots' blocks), the pool agrees with the tables (the
k-induction invariant's pool facts, `invariant._pool` and `_block_table`, with the free
queue's and the cache's orders), and two facts tie the exact hashes to the counted
per-request `num_cached` (a ghost that is never reset):

- every hash in the pool is block j of some request m's chain with j < m's counted
  num_cached (a block's hash is computed only once its request computed it,
  kv_cache_manager.py:607-616, single_type_kv_cache_manager.py:476-533; eviction only
  removes hashes, block_pool.py:666-750);
- a block a table names at position j, if it has a hash, has that slot's hash of block j
  (a hit adopts a block at the position of its hash, T:267-324), and a block without a
  hash has at most one holder (only a fresh allocation hands it out, P:666-750).

For each rule the counted rules replace (`RULES`: the lookup with its adoption, the
allocation, the caching of full blocks, the release of a preempted request, the release
of a step's finished requests on the Scheduler and on the AsyncScheduler, where their
outputs also cache blocks) and every exact step of it from related states, z3 shows that
the exact step's own values (its hit, evictable blocks and blocks freed) are a
`PoolChoice` inside the clamps, so that the counted rule given them returns the same
values, and that the results are related again. The initial states are related, so by
induction every exact run is a counted run: what BMC and k-induction conclude over the
counted rules holds on the exact ones.

The rules call the cache at the same places with the same arguments in both modes
(rules.py's `_lookup`, `_take`, `_cache`, `_release`, `_release_finished`,
`_deliver_to_cache`, called here), so equal values returned keep every other part of the
step equal. Premises stated in the claims: a looked-up request holds no blocks (it is
WAITING or PREEMPTED: invariant.py's slot facts), an allocation fits in the pool's free
blocks and the table (`state.within_bounds` sizes both for the run), the finished
requests were served in this step (their serve ranks are the step's), prefix groups are
numbered 0..slots (model/slots.py numbers them in arrival order; a larger number, which
BMC's bounds allow, is a renaming of one of these: hash ids are only compared for equality
and cache_rules.block_hash keeps every group's apart from the slots' own), every usable
block is a pool block (the bare free blocks `within_bounds` leaves out are never handed
out in the run), and at a step's start the free count is the blocks nobody holds (the
invariant's pool fact; the rules keep `w.free` by the values the cache returns, equal in
both modes). One `PoolChoice` per slot and step suffices: a slot is preempted at most once
in a step, and a lookup repeated by a stopped WAITING loop sees the same state and gives
the same hit.

Beyond these sizes the proof is an argument, not a proof: each rule's update is the same
fold at every size (a lookup walks block positions, an allocation ranks free blocks, a
release decrements one block per position), and each fact of the relation is about one
block, one position or one (block, position) pair.
"""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import z3

from checker.methods import proof_cache
from checker.methods.theorems import TheoremResult, stored
from model.core.ops import SymbolicOps
from model.core.types import SlotSpec
from model.vllm import abstract_cache, cache_rules, rules
from model.vllm.abstract_cache import CountWork, PoolChoice
from model.vllm.cache_rules import CacheWork
from model.vllm.state import (
    MAX_SYMBOLIC_TABLE,
    InFlight,
    RuleConfig,
    SchedState,
    SlotState,
)

_FRESH = itertools.count()
Fact = tuple[str, z3.BoolRef]


@dataclass(frozen=True, slots=True)
class Size:
    """One size of the exact symbolic cache: request slots, block-table entries, pool
    blocks and tokens per block."""

    slots: int
    table: int
    pool: int
    block_size: int

    def __str__(self) -> str:
        return (f"{self.slots} slots, table {self.table}, pool {self.pool}, "
                f"block size {self.block_size}")


#: The sizes the whole proof is taken to (tests/test_counted_refinement.py's slow test,
#: `python -m checker.methods.theorems.counted_refinement`): one and two request slots,
#: every table length the exact symbolic cache carries (MAX_SYMBOLIC_TABLE), pools of 1-4
#: blocks, block sizes 1, 2 and 4. The exact cache also carries pools of 5-8 blocks
#: (MAX_SYMBOLIC_POOL) and three slots; there z3 takes minutes per rule (the lookup at 3
#: slots, table 4, pool 8: 50-200 s per claim), so those sizes rest on the argument in
#: the module's docstring.
SIZES = tuple(Size(slots, table, pool, bs) for slots in (1, 2)
              for table in range(1, MAX_SYMBOLIC_TABLE + 1) for pool in (1, 2, 3, 4)
              for bs in (1, 2, 4))


def _config(size: Size, capped: bool = True, eagle: bool = False) -> RuleConfig:
    """A rule config with the exact cache at `size` (every usable block in the pool)."""
    return RuleConfig(token_budget=1, max_num_batched_tokens=1,
                      max_num_active_reqs=size.slots, max_num_seqs=size.slots,
                      max_model_len=size.table * size.block_size, usable_blocks=size.pool,
                      watermark_blocks=0, enable_chunked_prefill=True,
                      long_prefill_token_threshold=0, scheduler_reserve_full_isl=True,
                      block_size=size.block_size, policy_priority=False, prefix_caching=True,
                      cap_prefix_hit=capped, pool_blocks=size.pool, table_len=size.table,
                      eagle_block_drop=eagle)


@dataclass(frozen=True, slots=True)
class _Pair:
    """Related states: the exact pool and tables, the counted pool, the slots' blocks."""

    cfg: RuleConfig
    specs: tuple[SlotSpec, ...]
    exact: CacheWork
    counted: CountWork
    blocks: tuple[z3.ArithRef, ...]


def _ints(tag: str, name: str, n: int) -> list[z3.ArithRef]:
    return [z3.Int(f"{tag}.{name}{i}") for i in range(n)]


def _fresh_pair(cfg: RuleConfig, n: int) -> _Pair:
    """Related-state symbols: every field a fresh constant."""
    t = f"cr{next(_FRESH)}"
    pool, table = cfg.pool_blocks, cfg.table_len
    exact = CacheWork(ref=_ints(t, "ref", pool), hash=_ints(t, "hash", pool),
                      queue_key=_ints(t, "qkey", pool), cached_at=_ints(t, "at", pool),
                      table=[_ints(t, f"table{i}_", table) for i in range(n)],
                      num_cached=_ints(t, "exact_cached", n), queue_tail=z3.Int(f"{t}.tail"),
                      next_cached_at=z3.Int(f"{t}.next_at"))
    counted = CountWork(usable=cfg.usable_blocks, used=z3.Int(f"{t}.used"),
                        positions=z3.Int(f"{t}.positions"), num_cached=_ints(t, "cached", n),
                        choices=tuple(PoolChoice() for _ in range(n)))
    specs = tuple(SlotSpec(z3.Int(f"{t}.prompt{i}"), z3.Int(f"{t}.max_tokens{i}"), 1, 0, 0,
                           z3.Int(f"{t}.group{i}"), z3.Int(f"{t}.shared{i}"))
                  for i in range(n))
    return _Pair(cfg, specs, exact, counted, tuple(_ints(t, "blocks", n)))


def _copy(p: _Pair, choices: Sequence[PoolChoice] = ()) -> tuple[CacheWork, CountWork]:
    """Working copies of both pools (the rules update them in place)."""
    e = p.exact
    exact = CacheWork(list(e.ref), list(e.hash), list(e.queue_key), list(e.cached_at),
                      [list(row) for row in e.table], list(e.num_cached), e.queue_tail,
                      e.next_cached_at)
    c = p.counted
    counted = CountWork(c.usable, c.used, c.positions, list(c.num_cached),
                        tuple(choices) or c.choices)
    return exact, counted


def _spec_facts(p: _Pair) -> list[z3.BoolRef]:
    """Prefix groups numbered 0..slots (0: none), a shared prefix only within a group."""
    n = len(p.specs)
    return [z3.And(s.prefix_group >= 0, s.prefix_group <= n, s.shared_prefix_len >= 0,
                   z3.Implies(s.prefix_group == 0, s.shared_prefix_len == 0))
            for s in p.specs]


def _related(ops: SymbolicOps, p: _Pair, exact: CacheWork, counted: CountWork,
             blocks: Sequence[z3.ArithRef]) -> list[Fact]:
    """The simulation relation (the module's docstring), each fact named."""
    cfg, n = p.cfg, len(p.specs)
    out: list[Fact] = []
    for i, (row, held) in enumerate(zip(exact.table, blocks, strict=True)):
        out.append((f"r{i}: block table", z3.And(held >= 0, held <= cfg.table_len, *[
            z3.If(j < held, z3.And(e >= 1, e <= cfg.pool_blocks), e == 0)
            for j, e in enumerate(row)])))
    for b in range(cfg.pool_blocks):
        holders = sum(z3.If(z3.And(j < held, e == b + 1), 1, 0)
                      for row, held in zip(exact.table, blocks, strict=True)
                      for j, e in enumerate(row))
        out.append((f"block {b}: ref_cnt = table positions naming it",
                    exact.ref[b] == holders))
    in_use = sum(z3.If(r > 0, 1, 0) for r in exact.ref)
    out.append(("counted in use = blocks with ref_cnt > 0", counted.used == in_use))
    out.append(("counted positions = blocks held", counted.positions == sum(blocks)))
    queued = [z3.And(r == 0, h != 0) for r, h in zip(exact.ref, exact.hash, strict=True)]
    hashed = [h != 0 for h in exact.hash]
    for b in range(cfg.pool_blocks):
        out.append((f"block {b}: free queue key", z3.And(
            z3.Implies(queued[b], exact.queue_key[b] < exact.queue_tail),
            *[z3.Implies(z3.And(queued[a], queued[b]),
                         exact.queue_key[a] != exact.queue_key[b]) for a in range(b)])))
        out.append((f"block {b}: cache order", z3.And(
            z3.Implies(hashed[b], exact.cached_at[b] < exact.next_cached_at),
            *[z3.Implies(z3.And(hashed[a], hashed[b]),
                         exact.cached_at[a] != exact.cached_at[b]) for a in range(b)])))
    chains = [[cache_rules.block_hash(ops, cfg, spec, m, j, n) for j in range(cfg.table_len)]
              for m, spec in enumerate(p.specs)]
    for b, h in enumerate(exact.hash):
        known = [z3.And(h == chains[m][j], j < counted.num_cached[m])
                 for m in range(n) for j in range(cfg.table_len)]
        out.append((f"block {b}: its hash was cached by a request (counted num_cached)",
                    z3.Implies(h != 0, z3.Or(*known))))
        out.append((f"block {b}: without a hash, at most one holder",
                    z3.Implies(h == 0, exact.ref[b] <= 1)))
    for i, (row, held) in enumerate(zip(exact.table, blocks, strict=True)):
        for j, e in enumerate(row):
            own = [z3.Implies(z3.And(j < held, e == b + 1, h != 0), h == chains[i][j])
                   for b, h in enumerate(exact.hash)]
            out.append((f"r{i}: block {j}'s hash is its chain's", z3.And(*own)))
    return out


def _holds(facts: Sequence[Fact]) -> z3.BoolRef:
    return z3.And(*[f for _, f in facts])


@dataclass(frozen=True, slots=True)
class _Claim:
    """Hypotheses and named conclusions of one rule at one size."""

    hypotheses: tuple[z3.BoolRef, ...]
    conclusions: tuple[Fact, ...]


def _one_hot(n: int, k: int) -> list[bool]:
    """The rules' selection of slot k (a fold's selection is one-hot: each slot is its
    own claim)."""
    return [i == k for i in range(n)]


def _start(cfg: RuleConfig, size: Size, selected: int
           ) -> tuple[SymbolicOps, _Pair, str, list[object]]:
    """A one-slot claim's start: fresh ops, a fresh related pair at `size`, a tag for the
    claim's own symbols, and the selection of slot `selected`."""
    p = _fresh_pair(cfg, size.slots)
    return SymbolicOps(), p, f"cr{next(_FRESH)}", list(_one_hot(size.slots, selected))


def _lookup_claim(size: Size, capped: bool, eagle: bool, selected: int) -> _Claim:
    """A waiting request's lookup and the adoption of its hit (rules._waiting_loop): the
    exact hit and evictable blocks are the counted lookup's, within its clamps."""
    cfg = _config(size, capped, eagle)
    ops, p, tag, sel = _start(cfg, size, selected)
    n = size.slots
    total, do = z3.Int(f"{tag}.num_tokens"), z3.Bool(f"{tag}.do")
    exact, _ = _copy(p)
    w = _work(p.blocks, exact)
    hit = rules._lookup(ops, cfg, w, p.specs, sel, total)
    assert isinstance(hit, cache_rules.Hit)
    choice = PoolChoice(hit=hit.blocks, evictable=hit.evictable)
    _, counted = _copy(p, [choice] * n)
    cw = _work(p.blocks, counted)
    got = rules._lookup(ops, cfg, cw, p.specs, sel, total)
    assert isinstance(got, abstract_cache.CountHit)
    cache_rules.adopt(ops, exact, sel, hit, do)
    abstract_cache.adopt(ops, counted, sel, got, do)
    after = [z3.If(z3.And(do, s), hit.blocks, b) for s, b in zip(sel, p.blocks, strict=True)]
    hyps = (*_spec_facts(p), _holds(_related(ops, p, p.exact, p.counted, p.blocks)),
            p.blocks[selected] == 0, total >= 1)
    concl = [("the counted hit is the exact one", got.blocks == hit.blocks),
             ("the counted evictable blocks are the exact ones",
              got.evictable == hit.evictable),
             *_related(ops, p, exact, counted, after)]
    return _Claim((*hyps, *ops.take_definitions()), tuple(concl))


def _work(blocks: Sequence[z3.ArithRef], cache: CacheWork | CountWork,
          serve_rank: Sequence[z3.ArithRef] = ()) -> rules._Work:
    """The rules' step scratch with only what the cache's calls read: the slots' blocks,
    their serve ranks, the cache."""
    n = len(blocks)
    zeros: list[object] = [0] * n
    return rules._Work(status=list(zeros), ncomp=list(zeros), blocks=list(blocks),
                       run_key=list(zeros), wait_key=list(zeros),
                       num_preemptions=list(zeros), scheduled=list(zeros),
                       serve_rank=list(serve_rank) or list(zeros), preempted=[False] * n,
                       visited=[False] * n, free=0, token_budget=0, input_budget=0,
                       next_run_key=0, wait_head=0, served=0, any_preempted=False,
                       prefix_hit=list(zeros), cache=cache)


def _take_claim(size: Size, selected: int) -> _Claim:
    """An allocation of `count` free blocks to the selected request's table from position
    `start` (its blocks held), as the RUNNING and WAITING loops make it."""
    cfg = _config(size)
    ops, p, tag, sel = _start(cfg, size, selected)
    count, do = z3.Int(f"{tag}.count"), z3.Bool(f"{tag}.do")
    start = p.blocks[selected]
    exact, counted = _copy(p)
    rules._take(ops, cfg, _work(p.blocks, exact), sel, start, count, do)
    rules._take(ops, cfg, _work(p.blocks, counted), sel, start, count, do)
    free = sum(z3.If(r == 0, 1, 0) for r in p.exact.ref)
    after = [z3.If(z3.And(do, s), b + count, b) for s, b in zip(sel, p.blocks, strict=True)]
    hyps = (*_spec_facts(p), _holds(_related(ops, p, p.exact, p.counted, p.blocks)),
            count >= 0, count <= free, start + count <= cfg.table_len)
    return _Claim((*hyps, *ops.take_definitions()),
                  tuple(_related(ops, p, exact, counted, after)))


def _cache_claim(size: Size, selected: int) -> _Claim:
    """The selected request caches its full blocks up to `num_tokens` tokens."""
    cfg = _config(size)
    ops, p, tag, sel = _start(cfg, size, selected)
    tokens, do = z3.Int(f"{tag}.num_tokens"), z3.Bool(f"{tag}.do")
    exact, counted = _copy(p)
    rules._cache(ops, cfg, _work(p.blocks, exact), p.specs, sel, tokens, do)
    rules._cache(ops, cfg, _work(p.blocks, counted), p.specs, sel, tokens, do)
    hyps = (*_spec_facts(p), _holds(_related(ops, p, p.exact, p.counted, p.blocks)),
            )
    return _Claim((*hyps, *ops.take_definitions()),
                  tuple(_related(ops, p, exact, counted, p.blocks)))


def _release_claim(size: Size, selected: int) -> _Claim:
    """A preempted request (`selected`) releases its blocks (rules._preempt)."""
    ops = SymbolicOps()
    cfg = _config(size)
    n = size.slots
    p = _fresh_pair(cfg, n)
    do = z3.Bool(f"cr{next(_FRESH)}.do")
    exact, _ = _copy(p)
    freed = rules._release(ops, cfg, _work(p.blocks, exact), selected, do)
    choices = [PoolChoice(freed_preempted=freed)] * n
    _, counted = _copy(p, choices)
    got = rules._release(ops, cfg, _work(p.blocks, counted), selected, do)
    after = [z3.If(do, 0, b) if i == selected else b for i, b in enumerate(p.blocks)]
    hyps = (*_spec_facts(p), _holds(_related(ops, p, p.exact, p.counted, p.blocks)))
    concl = [("the counted blocks freed are the exact ones", got == freed),
             *_related(ops, p, exact, counted, after)]
    return _Claim((*hyps, *ops.take_definitions()), tuple(concl))


def _finished_claims(size: Size, asynchronous: bool) -> list[_Claim]:
    """The step's finished requests release their blocks (rules._release_finished, in
    the order they were served); on the AsyncScheduler each delivered output first caches
    its request's blocks, in the order its schedule served them (rules._deliver_to_cache).
    The exact blocks freed, all together, are the counted choice.

    On the Scheduler the claim is split into cases, one per choice of the finished slots
    and their serve ranks (each finished slot's rank one of 0..slots-1, as the hypotheses
    require; an unfinished slot's rank is left free): the cases' hypotheses together are
    the whole claim's, so the cases hold exactly when it does. Each case is decided whole
    within `_WHOLE_RLIMIT`, where the whole claim was decided one conclusion at a time:
    at 2 slots, table 4, pool 4, block size 1, 2.3 s of CPU for its nine cases where it
    took 6.4 s (the same process, load 6-10). On the AsyncScheduler the same split
    (delivered slots and ranks, with or without the finished ones) took 2-2.5 times
    longer, so its claim stays whole."""
    ops = SymbolicOps()
    cfg = replace(_config(size), async_scheduling=asynchronous)
    n = size.slots
    p = _fresh_pair(cfg, n)
    tag = f"cr{next(_FRESH)}"
    finished = [z3.Bool(f"{tag}.finished{i}") for i in range(n)]
    ranks = [z3.Int(f"{tag}.rank{i}") for i in range(n)]
    ends = list(finished)
    hyps = [*_spec_facts(p), _holds(_related(ops, p, p.exact, p.counted, p.blocks))]
    exact, _ = _copy(p)
    if asynchronous:
        delivered = [z3.Bool(f"{tag}.delivered{i}") for i in range(n)]
        got_token = [z3.Bool(f"{tag}.got{i}") for i in range(n)]
        slots = [SlotState(num_computed_tokens=z3.Int(f"{tag}.ncomp{i}"), in_flight=(InFlight(
            placeholders=z3.Int(f"{tag}.ph{i}"), pending_rank=r),)) for i, r in enumerate(ranks)]
        ends = [z3.And(d, f) for d, f in zip(delivered, finished, strict=True)]
        hyps += [z3.Implies(d, z3.And(r >= 0, r < n)) for d, r in zip(delivered, ranks,
                                                                      strict=True)]

        def release(w: rules._Work) -> z3.ArithRef:
            free, _ = rules._deliver_to_cache(ops, cfg, p.specs, w, slots, delivered,
                                              got_token, finished, 0, list(slots))
            return free
    else:
        hyps += [z3.Implies(f, z3.And(r >= 0, r < n)) for f, r in zip(finished, ranks,
                                                                      strict=True)]

        def release(w: rules._Work) -> z3.ArithRef:
            free, _ = rules._release_finished(ops, cfg, w, finished, 0,
                                              [SlotState() for _ in range(n)])
            return free
    freed = release(_work(p.blocks, exact, ranks))
    choices = [PoolChoice(freed_finished=freed), *[PoolChoice()] * (n - 1)]
    _, counted = _copy(p, choices)
    got = release(_work(p.blocks, counted, ranks))
    after = [z3.If(e, 0, b) for e, b in zip(ends, p.blocks, strict=True)]
    concl = tuple([("the counted blocks freed are the exact ones", got == freed),
                   *_related(ops, p, exact, counted, after)])
    whole = (*hyps, *ops.take_definitions())
    if asynchronous:
        return [_Claim(whole, concl)]
    per_slot = [[[z3.Not(f)], *[[f, r == k] for k in range(n)]]
                for f, r in zip(finished, ranks, strict=True)]
    return [_Claim((*whole, *[fact for part in case for fact in part]), concl)
            for case in itertools.product(*per_slot)]


def _initial_claim(size: Size) -> _Claim:
    """The initial states are related: nothing held, nothing cached, every block free."""
    ops = SymbolicOps()
    cfg = _config(size)
    n = size.slots
    p = _fresh_pair(cfg, n)
    exact = CacheWork.of(SchedState.initial(n, cfg))
    counted = CountWork.of(SchedState.initial(n, replace(cfg, abstract_cache=True)), cfg, ops,
                           None)
    return _Claim(tuple(_spec_facts(p)), tuple(_related(ops, p, exact, counted, [0] * n)))


def _each_slot(make: Callable[[Size, int], _Claim]) -> Callable[[Size], list[_Claim]]:
    """A rule whose call selects one slot: a claim per slot (the selection is one-hot)."""
    return lambda size: [make(size, selected=k) for k in range(size.slots)]


def _once(make: Callable[[Size], _Claim]) -> Callable[[Size], list[_Claim]]:
    return lambda size: [make(size)]


#: The rules the counted cache replaces: each gives its claims at a size.
RULES: dict[str, Callable[[Size], list[_Claim]]] = {
    "initial state": _once(_initial_claim),
    "lookup and adoption": _each_slot(functools.partial(_lookup_claim, capped=True,
                                                        eagle=False)),
    "lookup and adoption, the hit uncapped": _each_slot(functools.partial(
        _lookup_claim, capped=False, eagle=False)),
    "lookup and adoption, EAGLE's last block dropped": _each_slot(functools.partial(
        _lookup_claim, capped=True, eagle=True)),
    "allocation": _each_slot(_take_claim),
    "caching of full blocks": _each_slot(_cache_claim),
    "release of a preempted request": _each_slot(_release_claim),
    "release of the finished requests": functools.partial(_finished_claims,
                                                          asynchronous=False),
    "delivered outputs (async): caching, then release of the finished requests":
        functools.partial(_finished_claims, asynchronous=True),
}


# The first tactic (definitions solved away first, cardinality constraints taken as such)
# decides every claim of `SIZES` in less work than z3's default solver. A claim is tried
# whole within a fixed budget of z3's resource count (`_WHOLE_RLIMIT`; deterministic, so
# the same query gets the same answer at any load, where a wall-clock limit did not); a
# claim not decided within it is decided one conclusion at a time, each assuming those
# before it, with no limit but the caller's time. At 2 slots, table 4, pool 4 the release
# of the finished requests takes 5 s of CPU so, 9-20 s whole, 19 s by the default solver.
# The other tactics are fallbacks for an answer of unknown before the time is up. Each
# tactic's SMT core runs the legacy arithmetic solver (as checker/methods/solver.py's):
# the slow suite's shards took 195 s of CPU so (2026-12-06, quiet; 201-213 s without, the
# figures below), the largest (2 slots, table 4, pool 4) 64 s where it took 70 s.
_TACTICS = (("simplify", "propagate-values", "solve-eqs", "elim-uncnstr", "lia2card", "smt"),
            ("simplify", "solve-eqs", "smt"), ())
#: The whole-claim budget (about 0.3 s of CPU): it decides the small sizes' claims at once,
#: where one conclusion at a time costs 3-4 times more; beyond it a claim is cheaper one
#: conclusion at a time. Summed over `SIZES` (CPU s, one run each on a busy machine): 201 at
#: 3M, 213 at 10M, 228 at 25M, 236 with no whole try; 344 before (the default solver
#: first, 2 s of wall clock a try).
_WHOLE_RLIMIT = 3_000_000


def _solve(hypotheses: Sequence[z3.BoolRef], goal: z3.BoolRef, timeout_s: float,
           tactics: Sequence[tuple[str, ...]] = _TACTICS, rlimit: int = 0
           ) -> tuple[z3.CheckSatResult, z3.ModelRef | None]:
    """Whether `goal` follows from `hypotheses` (unsat of the negation), trying each of
    `tactics` in turn while time is left, each within z3's resource count `rlimit` (0: no
    limit); sat comes with a counterexample."""
    start = time.monotonic()
    result = z3.unknown
    for steps in tactics:
        left = timeout_s - (time.monotonic() - start)
        if left <= 0:
            break
        solver = (z3.Then(*steps[:-1], z3.With(steps[-1], **{"arith.solver": 2})).solver()
                  if steps else z3.Solver())
        solver.set(random_seed=0, timeout=max(1, int(left * 1000)), rlimit=rlimit)
        solver.add(*hypotheses)
        solver.add(z3.Not(goal))
        result = solver.check()
        if result == z3.sat:
            return result, solver.model()
        if result == z3.unsat:
            return result, None
    return result, None


def check(rule: str, size: Size, timeout_s: float) -> tuple[z3.CheckSatResult, str]:
    """z3's answer to the negation of `rule`'s claims at `size` (unsat: every claim
    holds), and, when one is sat, the conclusions a counterexample breaks (`_broken`). Each
    claim is tried whole within `_WHOLE_RLIMIT`, then one conclusion at a time, each
    assuming those before it."""
    start = time.monotonic()

    def left() -> float:
        return timeout_s - (time.monotonic() - start)

    for claim in RULES[rule](size):
        whole = z3.And(*[f for _, f in claim.conclusions])
        if _solve(claim.hypotheses, whole, left(), _TACTICS[:1], _WHOLE_RLIMIT)[0] == z3.unsat:
            continue
        proved: list[z3.BoolRef] = []
        for name, fact in claim.conclusions:
            result, _ = _solve([*claim.hypotheses, *proved], fact, left())
            if result == z3.sat:
                return result, _broken(claim, left())
            if result != z3.unsat:
                return result, name
            proved.append(fact)
    return z3.unsat, ""


def _broken(claim: _Claim, timeout_s: float) -> str:
    """The conclusions a counterexample can break, each asked alone and in order (not read
    off one model: which ones a model breaks depends on z3's search)."""
    start = time.monotonic()
    return "; ".join(name for name, fact in claim.conclusions
                     if _solve(claim.hypotheses, fact,
                               timeout_s - (time.monotonic() - start))[0] == z3.sat)


def prove(timeout_s: float, sizes: Sequence[Size] = SIZES,
          rules_: Sequence[str] | None = None) -> TheoremResult:
    """Every rule's refinement at every size in `sizes`; the first that is not valid fails
    the proof, named with z3's answer (and the facts its counterexample breaks)."""
    start = time.monotonic()
    names = list(RULES) if rules_ is None else list(rules_)
    for size in sizes:
        for name in names:
            left = timeout_s - (time.monotonic() - start)
            if left <= 0:
                return TheoremResult(False, time.monotonic() - start,
                                     f"{name} ({size}): time limit")
            result, broken = check(name, size, left)
            if result != z3.unsat:
                said = f"{result}" + (f", breaking: {broken}" if broken else "")
                return TheoremResult(False, time.monotonic() - start,
                                     f"{name} ({size}): {said}")
    seconds = time.monotonic() - start
    return TheoremResult(True, seconds, f"the counted cache refines the exact one: z3, per "
                         f"rule ({len(names)} rules), at {describe(sizes)}")


def describe(sizes: Sequence[Size]) -> str:
    """'N sizes (the range of each dimension)'."""
    def span(values: set[int]) -> str:
        lo, hi = min(values), max(values)
        return f"{lo}" if lo == hi else f"{lo}-{hi}" if hi - lo + 1 == len(values) else \
            "/".join(str(v) for v in sorted(values))
    return (f"{len(sizes)} sizes ({span({x.slots for x in sizes})} slots, tables of "
            f"{span({x.table for x in sizes})} entries, pools of "
            f"{span({x.pool for x in sizes})} blocks, block sizes "
            f"{span({x.block_size for x in sizes})})")


#: The sizes a check job proves before it names the refinement as the evidence of a
#: counted verdict (`evidence`): one and two slots, every table length the exact cache
#: carries, pools of 1-3 blocks, block sizes 1, 2 and 4 (12-25 s on 2 busy cores, paid
#: once per machine and sources, checker/methods/proof_cache.py). `SIZES` is the whole
#: list, for the slow test and `python -m` this module.
JOB_SIZES = tuple(dict.fromkeys(
    [Size(slots, 2, 2, 1) for slots in (1, 2)]
    + [Size(2, table, 2, 1) for table in range(1, MAX_SYMBOLIC_TABLE + 1)]
    + [Size(2, 2, pool, 1) for pool in (1, 2, 3)]
    + [Size(2, 2, 2, bs) for bs in (1, 2, 4)]))

_PROVED: dict[str, TheoremResult] = {}  # once a process


def stored_prove(timeout_s: float, sizes: Sequence[Size] = JOB_SIZES) -> TheoremResult:
    """`prove` at `sizes`, kept on disk once proved (keyed on the sizes, the rules and the
    sources, checker/methods/proof_cache.py) and for the process; a failure is not kept."""
    name = proof_cache.key("counted-refinement", tuple(sizes), tuple(RULES))
    if name not in _PROVED:
        result = stored(name, lambda: prove(timeout_s, sizes))
        if not result.proved:
            return result
        _PROVED[name] = result
    return _PROVED[name]


def evidence(engine_abstract_config: object, timeout_s: float) -> str:
    """What a verdict over vLLM's counted cache rests on for the exact rules: the z3
    refinement at `JOB_SIZES` once proved, else replayed runs only (with why)."""
    from model.vllm.engine import with_cache_counted

    if engine_abstract_config is not with_cache_counted:
        return "an over-approximation (no refinement proof for this engine's abstraction)"
    result = stored_prove(timeout_s)
    if result.proved:
        return result.detail
    return ("the carry-over to the exact rules rests on replayed runs only "
            f"(tests/test_abstract_cache.py): the z3 refinement did not prove ({result.detail})")


def main() -> None:
    """Prove every rule at every size of `SIZES`, printing each size's time."""
    import sys

    total = time.monotonic()
    for size in SIZES:
        start = time.monotonic()
        result = prove(3600.0, (size,))
        print(f"{size}: {'proved' if result.proved else result.detail} "
              f"({time.monotonic() - start:.1f} s)", flush=True)
        if not result.proved:
            sys.exit(1)
    print(f"{len(SIZES)} sizes, {len(RULES)} rules: {time.monotonic() - total:.0f} s")


if __name__ == "__main__":
    main()
