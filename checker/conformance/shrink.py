"""Shrink a workload while a predicate (\"the divergence persists\") keeps holding.

Greedy, in a fixed order, restarting after every accepted change: fewer steps, fewer
requests, fewer EOS entries, fewer requests in prefix groups, then config switches back to
the contract's defaults (prefix caching and async scheduling off among them: a divergence
that persists without them is the smaller one), then smaller numbers (config fields, then
request fields). A candidate is tried only if its config passes
`model.vllm_config.validate`, every prompt is shorter than max_model_len and every prefix
group is well formed (a request in a group shares 1..prompt_len tokens, one outside shares
none), so the shrunk workload is one vLLM and the workload contract accept; a shorter
prompt takes its shared prefix down with it. The result is 1-minimal for these moves: no
single move keeps the predicate true. The order follows the design's "minimal": fewest
steps, then fewest requests, then the least sharing, then smallest numbers.

The greedy loop (`greedy_shrink`) and the engine-free moves (`fewer_steps`,
`fewer_requests`, `fewer_eos`, `smaller_values`, `with_request`) serve SGLang's shrinker too
(sglang_generate.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from model.core.errors import InputError
from model.core.types import RequestSpec, Workload
from model.vllm.config import POLICY_FCFS, Config
from model.vllm.validation import validate

Move = Callable[[Workload], Iterator[Workload]]
"""One kind of shrinking move: the candidates one step smaller than a workload."""

#: Config fields shrunk towards a smaller integer, with their floor.
_CONFIG_INTS: tuple[tuple[str, int], ...] = (
    ("num_gpu_blocks", 2),
    ("max_num_batched_tokens", 1),
    ("max_num_seqs", 1),
    ("max_model_len", 2),
    ("long_prefill_token_threshold", 0),
    ("block_size", 1),
    ("max_num_scheduled_tokens", 1),
    ("max_num_active_seqs", 1),
)
#: Config fields moved back to vLLM's default value.
_CONFIG_DEFAULTS: tuple[tuple[str, object], ...] = (
    ("max_num_active_seqs", None),
    ("max_num_scheduled_tokens", None),
    ("long_prefill_token_threshold_adaptive", False),
    ("watermark", 0.0),
    ("scheduler_reserve_full_isl", True),
    ("enable_chunked_prefill", True),
    ("policy", POLICY_FCFS),
    ("enable_prefix_caching", False),
    ("async_scheduling", False),
)


def is_admissible(w: Workload) -> bool:
    """The config passes validation and vLLM's input processor accepts every prompt."""
    try:
        validate(w.config)
    except InputError:
        return False
    prompts = {r.id: r.prompt_len for r in w.requests}
    return all(1 <= r.prompt_len < w.config.max_model_len for r in w.requests) and all(
        r.arrival_step >= 1 and r.max_tokens >= 1 and _group_ok(r) for r in w.requests
    ) and all(h.tokens <= prompts.get(h.id, h.tokens) for h in w.kv_hits)


def _group_ok(r: RequestSpec) -> bool:
    """The contract's prefix-group rule (model/workload.py)."""
    if r.prefix_group is None:
        return r.shared_prefix_len == 0
    return 1 <= r.shared_prefix_len <= r.prompt_len


def shrink(workload: Workload, fails: Callable[[Workload], bool],
           max_calls: int = 3000) -> Workload:
    """The smallest vLLM workload reached from `workload` by greedy moves (`MOVES`) while
    `fails` holds and the workload stays `is_admissible` (`greedy_shrink`)."""
    return greedy_shrink(workload, fails, MOVES, is_admissible, max_calls)


def greedy_shrink(workload: Workload, fails: Callable[[Workload], bool],
                  moves_in_order: Sequence[Move], admissible: Callable[[Workload], bool],
                  max_calls: int) -> Workload:
    """The smallest workload reached from `workload` by greedy moves while `fails` holds.

    `fails(workload)` must be true on entry; a candidate counts only if it differs from
    the current workload and is `admissible`. Moves come in groups (`moves_in_order`);
    after an accepted move its group is tried again on the smaller workload, and passes
    over all groups repeat until one changes nothing. `max_calls` bounds the predicate
    calls. The engine's shrinker (`shrink` here for vLLM, sglang_generate.py's for
    SGLang) names its moves and its scope.
    """
    current = workload
    calls = 0
    changed = True
    while changed and calls < max_calls:
        changed = False
        for moves in moves_in_order:
            accepted = True
            while accepted and calls < max_calls:
                accepted = False
                for candidate in moves(current):
                    if calls >= max_calls:
                        break
                    if candidate == current or not admissible(candidate):
                        continue
                    calls += 1
                    if fails(candidate):
                        current, accepted, changed = candidate, True, True
                        break
    return current


def smaller_values(value: int, floor: int) -> Iterator[int]:
    """Smaller values to try, most aggressive first: the floor, then half the way down,
    a quarter, an eighth, ... down to one less. The ladder of steps makes a descent that
    fails at half-way still cost O(log) accepted moves, not one call round per unit (a live
    trace's prompt of 184 tokens walked down one token at a time spent the shrinker's
    whole budget and left four requests where two show the finding)."""
    seen: set[int] = set()
    step = (value - floor) // 2
    ladder = [floor]
    while step >= 1:
        ladder.append(value - step)
        step //= 2
    for v in (*ladder, value - 1):
        if floor <= v < value and v not in seen:
            seen.add(v)
            yield v


def fewer_steps(w: Workload) -> Iterator[Workload]:
    """`w` cut to fewer steps (`smaller_values`), dropping the EOS entries past the end."""
    for steps in smaller_values(w.steps, 1):
        yield replace(w, steps=steps, eos=tuple(e for e in w.eos if e.step <= steps))


def fewer_requests(w: Workload) -> Iterator[Workload]:
    """`w` without one of its requests (and that request's EOS entries), each in turn."""
    for i, r in enumerate(w.requests):
        yield replace(w, requests=w.requests[:i] + w.requests[i + 1:],
                      eos=tuple(e for e in w.eos if e.id != r.id))


def fewer_eos(w: Workload) -> Iterator[Workload]:
    """`w` without one of its EOS entries, each in turn."""
    for i in range(len(w.eos)):
        yield replace(w, eos=w.eos[:i] + w.eos[i + 1:])


def with_request(w: Workload, index: int, r: RequestSpec) -> Workload:
    """`w` with its request at `index` replaced by `r`."""
    return replace(w, requests=w.requests[:index] + (r,) + w.requests[index + 1:])


def _ungrouped(w: Workload) -> Iterator[Workload]:
    for i, r in enumerate(w.requests):
        if r.prefix_group is not None:
            yield with_request(w, i, replace(r, prefix_group=None, shared_prefix_len=0))


def _smaller_requests(w: Workload) -> Iterator[Workload]:
    for i, r in enumerate(w.requests):
        for field, floor in (("prompt_len", 1), ("max_tokens", 1), ("arrival_step", 1),
                             ("priority", 0), ("shared_prefix_len", 1)):
            if field == "shared_prefix_len" and r.prefix_group is None:
                continue
            for v in smaller_values(getattr(r, field), floor):
                smaller = replace(r, **{field: v})
                if field == "prompt_len" and r.prefix_group is not None:
                    smaller = replace(smaller, shared_prefix_len=min(r.shared_prefix_len, v))
                yield with_request(w, i, smaller)


def _smaller_config(w: Workload) -> Iterator[Workload]:
    for field, floor in _CONFIG_INTS:
        value = getattr(w.config, field)
        if value is not None:
            for v in smaller_values(value, floor):
                yield _with_config(w, replace(w.config, **{field: v}))


def _default_config(w: Workload) -> Iterator[Workload]:
    for field, default in _CONFIG_DEFAULTS:
        if getattr(w.config, field) != default:
            yield _with_config(w, replace(w.config, **{field: default}))


def candidates(w: Workload) -> Iterator[Workload]:
    """Every one-move shrink of `w`, group by group in `MOVES` order."""
    for moves in MOVES:
        yield from moves(w)


def _with_config(w: Workload, cfg: Config) -> Workload:
    return replace(w, config=cfg)


def _renamed(w: Workload) -> Iterator[Workload]:
    """Ids renamed to r0, r1, ... and prefix groups to g0, g1, ... in list order (only
    when that changes something)."""
    names = {r.id: f"r{i}" for i, r in enumerate(w.requests)}
    used = dict.fromkeys(r.prefix_group for r in w.requests if r.prefix_group is not None)
    groups = {g: f"g{k}" for k, g in enumerate(used)}
    if all(k == v for k, v in (*names.items(), *groups.items())):
        return
    yield replace(
        w,
        requests=tuple(replace(r, id=names[r.id], prefix_group=groups.get(r.prefix_group))
                       if r.prefix_group is not None else replace(r, id=names[r.id])
                       for r in w.requests),
        eos=tuple(replace(e, id=names[e.id]) for e in w.eos),
    )


MOVES: tuple[Move, ...] = (
    fewer_steps, fewer_requests, fewer_eos, _ungrouped, _default_config, _smaller_config,
    _smaller_requests, _renamed,
)
"""The shrinking moves, in the order tried: the design's "minimal" is fewest steps, then
fewest requests, then the least sharing, then smallest numbers; ids and groups are
renamed r0, r1, ... and g0, g1, ... last."""


def tidy(workload: Workload) -> Workload:
    """`workload` without the entries a shrink left behind that name a request it dropped
    or a step past its end (they take no effect; the workload parser refuses them). The
    moves above drop requests and steps, not the choices about them; audit and the live
    shrinker tidy what they keep."""
    ids = {r.id for r in workload.requests}

    def keep(entries: tuple) -> tuple:
        return tuple(e for e in entries if e.id in ids and e.step <= workload.steps)

    return replace(workload, eos=keep(workload.eos), accepted=keep(workload.accepted),
                   drafts=keep(workload.drafts), aborts=keep(workload.aborts))

