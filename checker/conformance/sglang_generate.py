"""Seeded random SGLang workloads for the conformance run against SGLang's real scheduler,
and a shrinker for a diverging one. Pure Python: nothing here imports SGLang.

Every workload is inside the model's scope (`in_scope`): a config the model accepts
(model/sglang/config.py `rejection`), prompts SGLang accepts, and with the radix cache on
no retracted prompt left in the tree (model/sglang/reference.py `retracted_prompt_evicted`,
docs/sglang_model.md, Encodings and departures).

Small configs: a 8-64 token pool, chunks of 2-16 or none, 1-5 requests, 4-24 steps,
context 64. Large: a 48-400 token pool, chunks of 8-64 or none, 2-12 requests, 10-60
steps, context 256. Both draw the policy (fcfs, lof, lpm), mixed chunk, the radix cache
on or off, cached prefixes (up to the whole prompt), EOS entries, the conservativeness,
the ratio knobs and max_running_requests; 40% of them get a pool cut below what their
requests need. Pressure: decode-heavy workloads (2-6 short prompts with 8-30 outputs,
20-50 steps, a low reservation ratio, a pool at 40-75% of the need) that retract.

With a page size P > 1 (`page_size`) the same three kinds are drawn in pages: small pools
of 4-12 pages, chunks of 1-4 pages, prompts up to 3 pages and up to 2P + 8 outputs; large
pools of 12-40 pages, chunks of 1-8 pages, prompts up to 8 pages; pressure: 3-8 prompts of
up to P + 4 tokens with P/2 + 4 to 2P + 16 outputs, 30-60 steps, a pool of 40-75% of the
need in whole pages. Contexts are 4P + 64 tokens (16P + 64 when large). Cached prefixes
are whole pages or not (a match is whole pages), and one request in ten has a fully cached
prompt of whole pages, whose last page the tree keeps. Page size 1 draws exactly what it
drew before page sizes were modelled.

With `spec` (EAGLE speculative decoding) the same workload is drawn, then: EAGLE or EAGLE3,
1-4 draft steps, topk 1 (two in three; the verify width is then steps + 1) or 2 (a width
of 2 to 2 x steps + 1); the pool grows by 0-3 decode reserves (2 x the per-decode
allocation) so that the over-allocation both fits and runs out; max_running_requests is
left to the EAGLE default one time in three; each request, in each step from its arrival
on, gets an accepted count (0 to the most a verify accepts less one) with probability 0.7
(the ones naming a step in which the request does not decode are dropped by the run,
`sglang_real.RealRun.effective`). Without `spec` nothing is drawn for it, so the same
seed gives the same workload as before.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from checker.conformance.shrink import (
    Move,
    fewer_eos,
    fewer_requests,
    fewer_steps,
    greedy_shrink,
    smaller_values,
    with_request,
)
from model.core.errors import InputError
from model.core.types import (
    FINISH_STOP,
    AcceptEvent,
    EosEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.sglang.config import POLICIES, POLICY_FCFS, SPEC_ALGORITHMS, Config, rejection
from model.sglang.engine import check_admissible
from model.sglang.reference import retracted_prompt_evicted

SIZES = ("any", "small", "large", "pressure")
MAX_REQUESTS = 499_000  # the driver's token ids: own tokens 1000 + i, a cached prefix 500000 + i
#: The shares of the "any" workloads: large, pressure, the rest small.
LARGE_SHARE, PRESSURE_SHARE = 0.2, 0.25
PRESSED_SHARE = 0.4  # small and large workloads whose pool is cut below what they need


def check_drivable(workload: Workload) -> None:
    """InputError unless the driver can run `workload` (an SGLang workload the model
    accepts)."""
    if workload.engine != "sglang" or not isinstance(workload.config, Config):
        raise InputError(f"the SGLang driver runs sglang workloads, not {workload.engine!r}")
    refused = rejection(workload.config)
    if refused is not None:
        raise InputError(f"the model refuses the config: {refused}")
    check_admissible(workload)
    if len(workload.requests) > MAX_REQUESTS:
        raise InputError(f"at most {MAX_REQUESTS} requests (their token ids)")
    if any(r.prefix_group is not None for r in workload.requests):
        raise InputError("prefix groups are vLLM's contract; an SGLang workload gives "
                         "cached_prefix_len")


def in_scope(w: Workload) -> bool:
    """The model accepts the workload, the driver can run it, and it stays inside the
    model's radix-cache scope."""
    try:
        check_drivable(w)
    except InputError:
        return False
    return retracted_prompt_evicted(w.config, w.requests)


def random_sglang_workload(seed: int, size: str = "any", page_size: int = 1,
                           spec: bool = False) -> Workload:
    """The workload of `seed` at `page_size`, with EAGLE when `spec` (the same arguments
    give the same workload)."""
    rng = random.Random(seed)
    if size == "any":
        u = rng.random()
        size = ("large" if u < LARGE_SHARE else
                "pressure" if u < LARGE_SHARE + PRESSURE_SHARE else "small")
    if page_size > 1:
        cfg, requests, steps = _draw_paged(rng, size, page_size)
    elif size == "pressure":
        cfg, requests, steps = _draw_pressure(rng)
    else:
        cfg, requests, steps = _draw_large(rng) if size == "large" else _draw_small(rng)
        if rng.random() < PRESSED_SHARE:
            cfg = _pressed(rng, cfg, requests, 0.3, 0.8)
    if spec:
        cfg = _with_eagle(rng, cfg)
    cfg, requests = _into_scope(rng, cfg, requests)
    eos = tuple(EosEvent(r.id, rng.randint(1, steps)) for r in requests
                if rng.random() < 0.3)
    accepted = _draw_accepted(rng, cfg, requests, steps) if spec else ()
    return Workload(config=cfg, requests=requests, eos=eos, steps=steps, engine="sglang",
                    accepted=accepted)


def _with_eagle(rng: random.Random, cfg: Config) -> Config:
    """`cfg` with EAGLE on (see the module doc)."""
    steps = rng.randint(1, 4)
    topk = rng.choice((1, 1, 2))
    tokens = steps + 1 if topk == 1 else rng.randint(2, 2 * steps + 1)
    cfg = replace(cfg, speculative_algorithm=rng.choice(SPEC_ALGORITHMS),
                  speculative_num_steps=steps, speculative_eagle_topk=topk,
                  speculative_num_draft_tokens=tokens)
    grown = cfg.max_total_num_tokens + rng.randint(0, 3) * cfg.decode_reserve
    cfg = replace(cfg, max_total_num_tokens=cfg.pages(grown))
    if rng.random() < 1 / 3:
        cfg = replace(cfg, max_running_requests=None)
    return cfg


def _draw_accepted(rng: random.Random, cfg: Config, requests: Sequence[RequestSpec],
                   steps: int) -> tuple[AcceptEvent, ...]:
    """Accepted counts for the requests' possible decode steps (see the module doc)."""
    top = cfg.max_accept_len - 1
    return tuple(AcceptEvent(r.id, t, rng.randint(0, top))
                 for r in requests for t in range(r.arrival_step, steps + 1)
                 if rng.random() < 0.7)


def _draw_config(rng: random.Random, pool: int, chunk: int | None, prefill: int,
                 running: int | None, context: int, decay: tuple[int, ...],
                 retract: tuple[int, ...], conservativeness: tuple[float, ...]) -> Config:
    return Config(
        max_total_num_tokens=pool, chunked_prefill_size=chunk, max_prefill_tokens=prefill,
        max_running_requests=running, schedule_policy=rng.choice(POLICIES),
        schedule_conservativeness=rng.choice(conservativeness),
        enable_mixed_chunk=rng.random() < 0.4, disable_radix_cache=rng.random() < 0.5,
        context_length=context, init_new_token_ratio=rng.choice((0.7, 0.7, 0.7, 1.0)),
        min_new_token_ratio_factor=rng.choice((0.14, 0.14, 1.0)),
        new_token_ratio_decay_steps=rng.choice(decay),
        retract_decode_steps=rng.choice(retract))


def _draw_requests(rng: random.Random, cfg: Config, count: int, longest: int,
                   most_tokens: int, last_arrival: int) -> tuple[RequestSpec, ...]:
    top = max(1, min(longest, cfg.max_req_input_len - 1))
    requests = []
    for i in range(count):
        prompt = rng.randint(1, top)
        cached = rng.randint(0, prompt) if rng.random() < 0.3 else 0
        requests.append(RequestSpec(id=f"r{i}", prompt_len=prompt,
                                    max_tokens=rng.randint(1, most_tokens),
                                    arrival_step=rng.randint(1, last_arrival),
                                    cached_prefix_len=cached))
    return tuple(requests)


def _draw_small(rng: random.Random) -> tuple[Config, tuple[RequestSpec, ...], int]:
    cfg = _draw_config(rng, pool=rng.randint(8, 64),
                       chunk=rng.choice((None, rng.randint(2, 16))),
                       prefill=rng.randint(2, 32),
                       running=rng.choice((None, rng.randint(1, 6))), context=64,
                       decay=(600, 5), retract=(20, 1),
                       conservativeness=(0.1, 0.3, 1.0, 2.0))
    steps = rng.randint(4, 24)
    return cfg, _draw_requests(rng, cfg, rng.randint(1, 5), 20, 12, 6), steps


def _draw_large(rng: random.Random) -> tuple[Config, tuple[RequestSpec, ...], int]:
    cfg = _draw_config(rng, pool=rng.randint(48, 400),
                       chunk=rng.choice((None, rng.randint(8, 64))),
                       prefill=rng.randint(8, 128),
                       running=rng.choice((None, rng.randint(2, 12))), context=256,
                       decay=(600, 20, 3), retract=(20, 1, 5),
                       conservativeness=(0.1, 0.3, 0.5, 1.0, 2.0))
    steps = rng.randint(10, 60)
    return cfg, _draw_requests(rng, cfg, rng.randint(2, 12), 120, 40, max(1, steps // 2)), steps


def _draw_pressure(rng: random.Random) -> tuple[Config, tuple[RequestSpec, ...], int]:
    """Decode-heavy: short prompts, long outputs, staggered arrivals, a low reservation
    ratio and a pool cut to 40-75% of the need, so running requests outgrow it."""
    cfg = _draw_config(rng, pool=64, chunk=rng.choice((None, rng.randint(2, 16))),
                       prefill=rng.randint(4, 32),
                       running=rng.choice((None, rng.randint(2, 6))), context=64,
                       decay=(600, 5, 2), retract=(20, 1, 3),
                       conservativeness=(0.1, 0.2, 0.3, 0.5))
    steps = rng.randint(20, 50)
    requests = tuple(RequestSpec(
        id=f"r{i}", prompt_len=(p := rng.randint(1, 8)), max_tokens=rng.randint(8, 30),
        arrival_step=rng.randint(1, 10),
        cached_prefix_len=rng.randint(0, p) if rng.random() < 0.3 else 0)
        for i in range(rng.randint(2, 6)))
    return _pressed(rng, cfg, requests, 0.4, 0.75), requests, steps


def _pressed(rng: random.Random, cfg: Config, requests: tuple[RequestSpec, ...],
             low: float, high: float) -> Config:
    """The pool cut to a share in [low, high] of every prompt plus its outputs (so decodes
    outgrow it and retract), never below what the longest prompt needs
    (max_req_input_len > prompt); whole pages."""
    need = sum(cfg.pages(r.prompt_len + r.max_tokens) for r in requests)
    floor = cfg.pages(max(8, max(r.prompt_len for r in requests) + 7))
    pool = max(floor, int(need * rng.uniform(low, high)))
    return replace(cfg, max_total_num_tokens=pool // cfg.page_size * cfg.page_size)


def _draw_paged(rng: random.Random, size: str, page: int
                ) -> tuple[Config, tuple[RequestSpec, ...], int]:
    """A workload of `size` drawn in pages of `page` tokens (see the module doc)."""
    if size == "large":
        pool, chunk_pages, top, most, count = rng.randint(12, 40), 8, 8 * page, 3 * page, 12
        steps, last_arrival, retract = rng.randint(10, 60), 30, (20, 1, 5)
        conservativeness: tuple[float, ...] = (0.1, 0.3, 0.5, 1.0, 2.0)
    elif size == "pressure":
        pool, chunk_pages, top, most, count = 64, 4, page + 4, 2 * page + 16, 8
        steps, last_arrival, retract = rng.randint(30, 60), 10, (20, 1, 3)
        conservativeness = (0.1, 0.2, 0.3, 0.5)
    else:
        pool, chunk_pages, top, most, count = rng.randint(4, 12), 4, 3 * page, 2 * page + 8, 5
        steps, last_arrival, retract = rng.randint(4, 24), 6, (20, 1)
        conservativeness = (0.1, 0.3, 1.0, 2.0)
    context = (16 if size == "large" else 4) * page + 64  # run_features reads the size back
    cfg = _draw_config(rng, pool=pool * page,
                       chunk=rng.choice((None, page * rng.randint(1, chunk_pages))),
                       prefill=rng.randint(2, 8 * page),
                       running=rng.choice((None, rng.randint(1, 6))), context=context,
                       decay=(600, 5, 2) if size == "pressure" else (600, 20, 5),
                       retract=retract, conservativeness=conservativeness)
    cfg = replace(cfg, page_size=page)
    requests = []
    for i in range(rng.randint({"small": 1, "large": 2}.get(size, 3), count)):
        top_here = max(1, min(top, cfg.max_req_input_len - 1))
        prompt = rng.randint(1, top_here)
        u = rng.random()
        if u < 0.1 and top_here >= page:  # a fully cached prompt of whole pages
            prompt = page * rng.randint(1, top_here // page)
            cached = prompt
        elif u < 0.4:
            cached = rng.choice((rng.randint(0, prompt), prompt // page * page))
        else:
            cached = 0
        least = page // 2 + 4 if size == "pressure" else 1
        requests.append(RequestSpec(id=f"r{i}", prompt_len=prompt,
                                    max_tokens=rng.randint(least, most),
                                    arrival_step=rng.randint(1, min(last_arrival, steps)),
                                    cached_prefix_len=cached))
    reqs = tuple(requests)
    if size == "pressure":
        cfg = _pressed(rng, cfg, reqs, 0.4, 0.75)
    elif rng.random() < PRESSED_SHARE:
        cfg = _pressed(rng, cfg, reqs, 0.3, 0.8)
    return cfg, reqs, steps


def _into_scope(rng: random.Random, cfg: Config, requests: tuple[RequestSpec, ...]
                ) -> tuple[Config, tuple[RequestSpec, ...]]:
    """With the radix cache on, either every retraction empties the tree's evictable part
    (retract_decode_steps >= the pool, 3 in 4) or no retraction can happen (a pool of at
    least every prompt plus its outputs); then mixed chunk off if the model refuses it."""
    if not retracted_prompt_evicted(cfg, requests):
        if rng.random() < 0.75:
            cfg = replace(cfg, retract_decode_steps=cfg.max_total_num_tokens
                          + rng.randint(0, 16))
        else:
            reserve = cfg.decode_reserve if cfg.speculative else 0
            cfg = replace(cfg, max_total_num_tokens=sum(
                cfg.pages(r.prompt_len + r.max_tokens + reserve) for r in requests))
    if rejection(cfg) is not None:
        cfg = replace(cfg, enable_mixed_chunk=False)
    return cfg, requests


# ---------------------------------------------------------------------------- shrink

#: Config fields moved to their simplest value (mechanisms off, SGLang's defaults).
_SIMPLE_CONFIG: tuple[tuple[str, object], ...] = (
    ("enable_mixed_chunk", False),
    ("schedule_policy", POLICY_FCFS),
    ("disable_radix_cache", True),
    ("max_running_requests", None),
    ("schedule_conservativeness", 1.0),
    ("init_new_token_ratio", 0.7),
    ("min_new_token_ratio_factor", 0.14),
    ("new_token_ratio_decay_steps", 600),
    ("retract_decode_steps", 20),
    ("page_size", 1),
)
#: Config fields shrunk towards a smaller integer, with their floor (none of those moved to
#: a default above, or the two moves would undo each other).
_CONFIG_INTS: tuple[tuple[str, int], ...] = (
    ("max_total_num_tokens", 8),
    ("chunked_prefill_size", 1),
    ("max_prefill_tokens", 1),
    ("max_running_requests", 1),
    ("context_length", 8),
    ("speculative_num_steps", 1),
    ("speculative_num_draft_tokens", 1),
)


def shrink(workload: Workload, fails: Callable[[Workload], bool],
           max_calls: int = 2000) -> Workload:
    """The smallest workload reached from `workload` by greedy moves (`MOVES`, in order)
    while `fails` holds and the workload stays `in_scope` (shrink.py `greedy_shrink`);
    `fails(workload)` must hold on entry. After an accepted move its group is tried
    again; passes repeat until none changes anything, or `max_calls` predicate calls."""
    return greedy_shrink(workload, fails, MOVES, in_scope, max_calls)


def _simpler_config(w: Workload) -> Iterator[Workload]:
    if w.config.speculative:  # EAGLE off, its knobs and accepted counts with it
        yield replace(w, accepted=(), config=replace(
            w.config, speculative_algorithm=None, speculative_num_steps=None,
            speculative_eagle_topk=None, speculative_num_draft_tokens=None))
    for name, simple in _SIMPLE_CONFIG:
        if getattr(w.config, name) != simple:
            yield replace(w, config=replace(w.config, **{name: simple}))


def _smaller_config(w: Workload) -> Iterator[Workload]:
    for name, floor in _CONFIG_INTS:
        value = getattr(w.config, name)
        if value is not None and value > 0:
            for v in smaller_values(value, floor):
                yield replace(w, config=replace(w.config, **{name: v}))


def _smaller_requests(w: Workload) -> Iterator[Workload]:
    for i, r in enumerate(w.requests):
        for name, floor in (("prompt_len", 1), ("max_tokens", 1), ("arrival_step", 1),
                            ("cached_prefix_len", 0)):
            for v in smaller_values(getattr(r, name), floor):
                shrunk = replace(r, **{name: v})
                if name == "prompt_len":
                    shrunk = replace(shrunk, cached_prefix_len=min(r.cached_prefix_len, v))
                yield with_request(w, i, shrunk)


def _fewer_accepted(w: Workload) -> Iterator[Workload]:
    """`w` without one of its accepted counts, each in turn (a run of one token there)."""
    for i in range(len(w.accepted)):
        yield replace(w, accepted=w.accepted[:i] + w.accepted[i + 1:])


def _smaller_accepted(w: Workload) -> Iterator[Workload]:
    for i, e in enumerate(w.accepted):
        for v in smaller_values(e.count, 0):
            yield replace(w, accepted=(*w.accepted[:i], replace(e, count=v),
                                       *w.accepted[i + 1:]))


def _renamed(w: Workload) -> Iterator[Workload]:
    """Ids renamed r0, r1, ... in list order (only when that changes something)."""
    names = {r.id: f"r{i}" for i, r in enumerate(w.requests)}
    if all(k == v for k, v in names.items()):
        return
    yield replace(w, requests=tuple(replace(r, id=names[r.id]) for r in w.requests),
                  eos=tuple(replace(e, id=names[e.id]) for e in w.eos),
                  accepted=tuple(replace(e, id=names[e.id]) for e in w.accepted
                                 if e.id in names))


MOVES: tuple[Move, ...] = (
    fewer_steps, fewer_requests, fewer_eos, _fewer_accepted, _simpler_config,
    _smaller_config, _smaller_requests, _smaller_accepted, _renamed,
)
"""The shrinking moves in the order tried: fewest steps, then fewest requests, EOS
entries and accepted counts, then the simplest config, then the smallest numbers; ids
renamed last."""


# -------------------------------------------------------------------------- coverage

FEATURES: tuple[str, ...] = (
    "size:small", "size:large", "policy:fcfs", "policy:lof", "policy:lpm+radix",
    "radix", "cached_prefix", "batch:prefill", "batch:decode", "batch:mixed", "batch:idle",
    "chunked", "latch", "latch_dropped_by_merge", "retraction", "retraction_reorders",
    "resumed", "fully_cached_prompt", "eos_stop", "ratio_reset", "paged", "page_hit",
    "page_cut_chunk", "unaligned_chunk_end",
)
"""What `run_features` names: the workload's switches, and the mechanisms a run used
(`latch_dropped_by_merge`: an extend step with the latch set and no running request
beside the batch, so the next merge takes the batch's fresh latch, S:3830-3833;
`retraction_reorders`: the survivors of a retraction changed order, B:3379;
`fully_cached_prompt`: a request with its whole prompt cached ran on after its prefill;
`paged`: page size > 1; `page_hit`: a new request's cache hit cut to whole pages below its
cached prefix; `page_cut_chunk`: a new chunk cut to whole pages below the chunk budget,
P:1567-1573; `unaligned_chunk_end`: a chunk ending inside a page, so the next chunk
continues it)."""
PAGE_FEATURES: tuple[str, ...] = ("paged", "page_hit", "page_cut_chunk", "unaligned_chunk_end")
"""The `FEATURES` only a page size > 1 can reach."""
SPEC_FEATURES: tuple[str, ...] = (
    "eagle", "eagle_topk>1", "accepted_run", "run_crosses_max_new", "eos_demoted_to_length",
    "spec_retraction", "spec_abort", "spec_mixed",
)
"""What `run_features` also names under EAGLE: `accepted_run`: a decode committed more than
one token for a request; `run_crosses_max_new`: a run took a request past max_new_tokens
(a length finish, B:1940-1942); `eos_demoted_to_length`: such a run ended in the EOS
(B:1901-1911); `spec_retraction` / `spec_abort` / `spec_mixed`: a retraction, an abort or
a mixed step with the over-allocation in the decode check."""


def run_features(w: Workload, records: Sequence[StepRecord]) -> frozenset[str]:
    """The `FEATURES` this workload has and its run (the records of either scheduler)
    used."""
    cfg: Config = w.config
    found = {f"policy:{cfg.schedule_policy}" if cfg.schedule_policy != "lpm" else
             "policy:lpm+radix" if not cfg.disable_radix_cache else "policy:fcfs"}
    found.add("size:large" if cfg.context_length > 4 * cfg.page_size + 64 else "size:small")
    if not cfg.disable_radix_cache:
        found.add("radix")
        if any(r.cached_prefix_len for r in w.requests):
            found.add("cached_prefix")
    full_cached = {r.id for r in w.requests if r.cached_prefix_len >= r.prompt_len}
    ratio_init = float(cfg.ratio_init())
    page = cfg.page_size
    cached = {r.id: r.cached_prefix_len for r in w.requests}
    prompt = {r.id: r.prompt_len for r in w.requests}
    if page > 1:
        found.add("paged")
    for t, rec in enumerate(records):
        extra = dict(rec.extra)
        found.add(f"batch:{extra['batch']}")
        finished = dict(rec.finished)
        scheduled = dict(rec.scheduled)
        if extra["chunked_req"] is not None:
            found.add("chunked")
        if extra["batch_is_full"]:
            found.add("latch")
            kept = [r for r in scheduled if r not in finished and r != extra["chunked_req"]]
            if (extra["batch"] in ("prefill", "mixed") and kept
                    and all(r in scheduled for r in rec.running)):
                found.add("latch_dropped_by_merge")
        if rec.preempted:
            found.add("retraction")
            before = [r for r in records[t - 1].running if r in rec.running] if t else []
            if before != list(rec.running):
                found.add("retraction_reorders")
        if rec.resumed:
            found.add("resumed")
        computed = dict(rec.num_computed_tokens)
        for rid in rec.admitted if page > 1 and not cfg.disable_radix_cache else ():
            if computed.get(rid, 0) - scheduled.get(rid, 0) < min(cached[rid], prompt[rid] - 1):
                found.add("page_hit")
            if rid == extra["chunked_req"] and (extra["rem_chunk_tokens"] or 0) > 0:
                found.add("page_cut_chunk")
        if page > 1 and extra["chunked_req"] is not None and \
                computed.get(extra["chunked_req"], 0) % page:
            found.add("unaligned_chunk_end")
        if not cfg.disable_radix_cache and any(
                r in full_cached and r not in finished for r in rec.admitted):
            found.add("fully_cached_prompt")
        if FINISH_STOP in finished.values():
            found.add("eos_stop")
        if extra["new_token_ratio"] != extra["new_token_ratio_after"] == round(ratio_init, 6):
            found.add("ratio_reset")
    if cfg.speculative:
        found |= _spec_features(w, records)
    return frozenset(found)


def _spec_features(w: Workload, records: Sequence[StepRecord]) -> set[str]:
    """The `SPEC_FEATURES` of an EAGLE workload's run."""
    cfg: Config = w.config
    found = {"eagle"} | ({"eagle_topk>1"} if (cfg.speculative_eagle_topk or 1) > 1 else set())
    outputs = dict.fromkeys((r.id for r in w.requests), 0)
    limit = {r.id: cfg.clip_max_new_tokens(r.prompt_len, r.max_tokens) for r in w.requests}
    eos = w.eos_ids_by_step()
    for rec in records:
        extra = dict(rec.extra)
        decode = extra["batch"] == "decode"
        finished = dict(rec.finished)
        for rid, n in rec.scheduled:
            if rid == extra["chunked_req"]:
                continue
            run = n if decode else 1
            if run > 1:
                found.add("accepted_run")
            outputs[rid] = outputs.get(rid, 0) + run
            if outputs[rid] > limit[rid] and finished.get(rid) == "length":
                found.add("run_crosses_max_new")
                if rid in eos.get(rec.step, ()):
                    found.add("eos_demoted_to_length")
        if rec.preempted:
            found.add("spec_retraction")
        if extra["aborted"]:
            found.add("spec_abort")
        if extra["batch"] == "mixed":
            found.add("spec_mixed")
    return found
