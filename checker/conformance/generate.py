"""Seeded random workloads and configs for the conformance run (pure Python, no vLLM).

`random_workload(seed)` is deterministic: the same seed gives the same workload on every
machine (it uses only its own `random.Random(seed)`). Each knob is drawn independently
with weights chosen so that a batch of a few dozen seeds reaches every feature of the
modelled scope (see `STATIC_FEATURES`, `RUN_FEATURES` and `checker.conformance.branches`):
both policies, chunked prefill on and off, the long-prefill cap (fixed and adaptive),
the watermark, the full-sequence admission check on and off, KV pools from ample to
scarce (preemption, self-preemption, head-of-line blocking), seq caps, arrivals over time,
EOS, and both `length` finishes (max_tokens and max_model_len).

EOS entries. An entry says "the token request X samples in step s is EOS". The generator
draws s inside the window in which X plausibly decodes (after its arrival, within its
prefill time plus max_tokens plus slack); it does not run a scheduler, so some entries
name a step in which X samples nothing (it is waiting, mid-prefill, preempted or already
finished). The reference rejects those (EOS can only be a sampled token), so
`checker.conformance.compare` runs the real scheduler first and keeps only the entries
that named a step in which the request really sampled; the dropped ones had no effect on
that run. About a third of the drawn entries take effect; `RUN_FEATURES` counts the runs
in which one finished a request (`finished:stop`).

`random_prefix_workload(seed)` is the prefix-caching mode's generator (prefix caching on,
prefix groups and shared lengths drawn so that cache hits, sharing, eviction and
duplicate hashes are common); `PREFIX_STATIC_FEATURES` and `PREFIX_RUN_FEATURES` say how
often each occurs. `checker.conformance.modes` names the modes.

`random_spec_workload(seed)` and its prefix / async / async+prefix forms are the
speculative-decoding modes' generators (`SPEC_STATIC_FEATURES`, `SPEC_RUN_FEATURES`): a
method the harness builds offline (ngram, draft_model with and without parallel drafting,
eagle, eagle3; the async ones without ngram, which vLLM refuses there), k in 1..4, tight
budgets, pools, max_model_len and long-prefill thresholds in 1..k, and the environment's
choices: accepted counts 0..k per request and step (the driver applies at most the drafts
scheduled, `RealRun.effective_accepted`), and for ngram draft counts 0..k.

`random_connector_workload(seed)` is the KV-connector mode's generator (the synchronous
Scheduler with the harness's connector, checker/conformance/vllm_connector.py): for most
requests an external hit (a block-aligned share of the prompt, the prompt less one token,
or now and then the whole prompt), loaded asynchronously about two times in three; load
reports (one in five failed) at steps after each async request's arrival, some of which
name no load in flight and do nothing; client aborts (checker/conformance/aborts.py), some
of them of requests whose load is in flight; pools from ample to scarce
(`CONNECTOR_RUN_FEATURES` counts what the runs reach).

`random_any_config(seed)` draws configs that are often invalid, for the config-validation
conformance: each breaks zero, one or two of vLLM's SchedulerConfig rules.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import replace

from model.core.errors import InputError
from model.core.types import (
    FINISH_ABORT,
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    AcceptEvent,
    DraftEvent,
    EosEvent,
    ExternalHit,
    KVLoadEvent,
    RequestSpec,
    StepRecord,
    Workload,
)
from model.vllm.config import (
    GROUP_FULL,
    GROUP_MAMBA,
    GROUP_SLIDING,
    POLICY_FCFS,
    POLICY_PRIORITY,
    VERSIONS,
    Config,
    KvGroup,
)
from model.vllm.validation import NEWER_FIELDS, validate

#: Features decided by the workload alone (config and requests), in report order.
STATIC_FEATURES: tuple[str, ...] = (
    "policy:fcfs",
    "policy:priority",
    "chunked_prefill:on",
    "chunked_prefill:off",
    "long_prefill:off",
    "long_prefill:fixed",
    "long_prefill:adaptive",
    "watermark:on",
    "full_isl:off",
    "pool:ample",
    "pool:scarce",
    "max_num_active_seqs:set",
    "max_num_scheduled_tokens:set",
    "arrivals:later",
    "eos:entries",
    "length:model_len_reachable",
)

#: Features observed in a run's StepRecords (either scheduler's), in report order.
RUN_FEATURES: tuple[str, ...] = (
    "admitted",
    "chunked:partial_prefill",
    "budget:exhausted",
    "preempted",
    "preempted:several_in_one_step",
    "resumed",
    "waiting:not_admitted_with_budget_left",
    "finished:stop",
    "finished:length:max_tokens",
    "finished:length:model_len",
)

#: Features of a prefix-caching workload alone, in report order.
PREFIX_STATIC_FEATURES: tuple[str, ...] = (
    "prefix:group_of_several",  # two or more requests in one prefix group
    "prefix:group_arrives_later",  # a group's request arrives after another of the group
    "prefix:whole_prompt_shared_block_aligned",  # its last block is recomputed on a hit
    "prefix:shared_mid_block",  # the shared prefix ends inside a block
    "prefix:shared_under_a_block",  # shares tokens but not one whole block
    "prefix:ungrouped",  # a request that shares nothing
)

#: Features of a prefix-caching run, in report order: the first three read from the
#: records' cache facts, the others noted on the real engine by the driver's probe
#: (checker/conformance/vllm_real.py, `_CacheProbe`).
PREFIX_RUN_FEATURES: tuple[str, ...] = (
    "prefix:hit",  # an admission hit the cache
    "prefix:hit_resumed",  # a preempted request resumed with a hit (its own blocks)
    "prefix:shared_blocks_held",  # after schedule(), one block held by two requests
    "prefix:hit_shared",  # a hit adopted a block a running request holds
    "prefix:hit_evictable",  # a hit took an evictable block out of the free queue
    "prefix:hit_same_step",  # a hit on a block cached earlier in the same step
    "prefix:hit_capped",  # the num_tokens - 1 cap left a cached block out of the hit
    "prefix:hit_full_isl",  # the full-sequence check ran with a hit
    "prefix:hit_watermark",  # the watermark was counted with a hit
    "prefix:hit_refused",  # allocate_slots refused a request with a hit
    "prefix:hit_evictable_need",  # evictable hit blocks counted in the need
    "prefix:hit_evictable_refused",  # ... and the request refused for them (P5)
    "prefix:evicted",  # a cached block lost its hash when reused
    "prefix:duplicate",  # one hash cached on two blocks
    "prefix:duplicate_after_cap",  # ... the capped block of a fully cached prompt
    "prefix:duplicate_on_resume",  # ... by a preempted request re-hitting its own blocks
    "prefix:free_still_held",  # a freed block stayed held by another request
)
#: The PREFIX_RUN_FEATURES the driver's probe notes (the others come from the records).
PROBED_FEATURES: tuple[str, ...] = PREFIX_RUN_FEATURES[3:]

#: Features of an async run (the AsyncScheduler, output applied one engine step late), in
#: report order: the first five read from the records and their `sampled` fact, the last
#: noted on the real engine by the driver's probe (vllm_real.py, `_AsyncProbe`). A1-A7 name
#: the scenarios of notes/vllm_prefix_async.md, section 8.
ASYNC_RUN_FEATURES: tuple[str, ...] = (
    "async:eos_one_step_late",  # given one more token in the step its EOS is applied (A2)
    "async:freed_blocks_next_step",  # a finish's blocks first used by the next schedule (A5)
    "async:preempted_in_flight",  # a victim of schedule(k) was scheduled by schedule(k-1)
    "async:stale_token",  # ... and sampled there: its token is delivered after preemption
    "async:stale_finish",  # ... and that token finished it, from the waiting queue
    "async:phantom_preemption",  # a request with EOS in flight preempted a request (A7)
)
#: Features of an async run with prefix caching on (noted by the driver's probe).
ASYNC_PREFIX_RUN_FEATURES: tuple[str, ...] = (
    "async:uncached_block_lost",  # a victim's full block not yet cached at output (A5)
)
#: The async features the driver's probe notes (the others come from the records).
ASYNC_PROBED_FEATURES: tuple[str, ...] = ("async:phantom_preemption",
                                          *ASYNC_PREFIX_RUN_FEATURES)

#: Speculative decoding, features of the workload alone, in report order (the async modes
#: draw no ngram and no draft counts: `SPEC_ASYNC_STATIC_FEATURES`).
SPEC_STATIC_FEATURES: tuple[str, ...] = (
    "spec:method:ngram",
    "spec:method:draft_model",
    "spec:method:draft_model_parallel",  # PARD: k draft slots
    "spec:method:eagle",
    "spec:method:eagle3",
    "spec:lookahead",  # num_lookahead_tokens > 0
    "spec:draft_slots",  # draft slots > 0
    "spec:threshold_le_k",  # 1 <= long_prefill_token_threshold <= k (the 1372 hazard)
    "spec:budget_tight",  # max_num_batched_tokens < 2 (1 + k + draft slots)
    "spec:model_len_tight",  # a request's prompt + max_tokens passes max_model_len
    "spec:drafts_fewer_than_k",  # a drafts entry below k (ngram)
)
SPEC_ASYNC_STATIC_FEATURES: tuple[str, ...] = tuple(
    f for f in SPEC_STATIC_FEATURES if f not in ("spec:method:ngram", "spec:drafts_fewer_than_k"))

#: Speculative decoding, features of a run, in report order: read from the records'
#: `spec_scheduled` / `accepted` facts, or noted on the real engine by the driver's probe
#: (`SPEC_PROBED_FEATURES`, vllm_real.py `_SpecProbe`).
SPEC_RUN_FEATURES: tuple[str, ...] = (
    "spec:drafts_scheduled",  # a schedule gave a request spec tokens
    "spec:accepted_some",  # an output accepted some of its drafts
    "spec:accepted_all",  # ... all of them
    "spec:rejected_some",  # ... rejected some (num_computed_tokens rolled back)
    "spec:finished_with_accepted",  # a request finished on an output with accepted drafts
    "spec:padded",  # a waiting request with 1 token left padded to 1 + k (-1 drafts)
    "spec:assertion",  # the engine died at scheduler.py:1372
    "spec:drafts_trimmed_budget",  # fewer spec tokens than drafts: the budgets
    "spec:drafts_trimmed_threshold",  # ... the long-prefill threshold
    "spec:drafts_trimmed_mml",  # ... the max_model_len cap (or skipped by it)
    "spec:draft_slot_starvation",  # input budget spent on draft slots, a request unserved
    "spec:preempted",  # a preemption with speculative decoding on
    "spec:lookahead_refused_running",  # a running allocation refused for lookahead alone
    "spec:lookahead_refused_waiting",  # an admission refused for lookahead alone
    "spec:victim_gave_back_drafts",  # a PRIORITY victim scheduled earlier in the step
)
SPEC_ASYNC_RUN_FEATURES: tuple[str, ...] = (
    "spec:stale_drafts",  # a victim's in-flight output had drafts (no rollback, 2124)
)
SPEC_PREFIX_RUN_FEATURES: tuple[str, ...] = (
    "spec:padded_after_hit",  # padded after a prefix hit left it one token
)
SPEC_PROBED_FEATURES: tuple[str, ...] = (
    "spec:drafts_trimmed_budget", "spec:drafts_trimmed_threshold", "spec:drafts_trimmed_mml",
    "spec:lookahead_refused_running", "spec:lookahead_refused_waiting",
    "spec:victim_gave_back_drafts",
)

_BLOCK_SIZES = (1, 2, 4, 4, 8, 16)
_BATCH_BLOCK_SIZES = (1, 2, 4, 4, 8, 16)
_BUDGETS = (8, 12, 16, 24, 32, 48, 64)
_WATERMARKS = (0.01, 0.05, 0.1, 0.2, 0.3)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def at_release(workload: Workload, version: str) -> Workload:
    """`workload` for vLLM `version`: its config with that release's rule switches
    (model/vllm/config.py VERSIONS), the fields the release lacks at their defaults (its
    validation refuses them otherwise, model/vllm/validation.py NEWER_FIELDS)."""
    rules = VERSIONS[version]
    defaults = Config()
    lacking = {name: getattr(defaults, name) for name, switch, _, _ in NEWER_FIELDS
               if not getattr(rules, switch)}
    cfg = replace(workload.config, rules=rules, version=version, **lacking)
    return replace(workload, config=_draft_slots_reserved(cfg))


def _draft_slots_reserved(cfg: Config) -> Config:
    """Before 0.28.0 the draft slots of max_num_seqs requests come out of the budget at
    startup (rule draft_slots_reserved): fewer seats, and a max_num_scheduled_tokens
    within what is left, keep a tight budget valid."""
    if not cfg.speculative_method or cfg.rules.per_request_draft_slots:
        return cfg
    b, ds = cfg.max_num_batched_tokens, cfg.draft_slots
    if ds:
        cfg = replace(cfg, max_num_seqs=max(1, min(cfg.max_num_seqs, (b - 1) // ds)))
    if cfg.max_num_scheduled_tokens is not None:
        cfg = replace(cfg, max_num_scheduled_tokens=min(cfg.max_num_scheduled_tokens,
                                                        b - cfg.reserved_draft_slots))
    return cfg


def random_workload(seed: int, steps: int = 30) -> Workload:
    """A valid workload (config passes `model.vllm_config.validate`, every prompt is
    shorter than max_model_len) drawn from `seed` alone.

    About 40% of seeds draw a *decode batch*: several short prompts of similar length
    with long outputs arriving together (later ones with other priorities), in a KV pool
    they outgrow, so that many requests cross a block boundary in the same step; this is
    what drives repeated preemption, self-preemption and PRIORITY victim choices
    (the digest's scenarios C and C2). The other seeds draw independent mixed requests.
    """
    rng = random.Random(seed)
    batch = rng.random() < 0.4
    n_req = rng.randint(3, 10) if batch else rng.randint(1, 10)
    if batch:
        base = rng.randint(1, 6)
        spread = 0 if rng.random() < 0.7 else 1  # equal lengths cross blocks together
        prompts = [max(1, base + rng.randint(-spread, spread)) for _ in range(n_req)]
        max_tokens = [rng.randint(8, 24) for _ in range(n_req)]
        for _ in range(rng.randint(0, 2)):  # a few longer prompts join later
            prompts.append(rng.randint(8, 40))
            max_tokens.append(rng.randint(1, 8))
    else:
        prompts = [_draw_prompt(rng) for _ in range(n_req)]
        max_tokens = [rng.choice((rng.randint(1, 6), rng.randint(1, 24))) for _ in prompts]
    cfg = _draw_config(rng, prompts, max_tokens, n_req if batch else 0)
    last_arrival = max(1, (2 * steps) // 3)
    requests: list[RequestSpec] = []
    for i, (p, mt) in enumerate(zip(prompts, max_tokens, strict=True)):
        if batch and i < n_req:  # a first wave, and a second one a few steps later
            arrival = 1 if rng.random() < 0.65 else rng.randint(2, 4)
        elif batch:  # the longer prompts join once the batch decodes
            arrival = rng.randint(2, last_arrival)
        else:
            arrival = 1 if rng.random() < 0.55 else rng.randint(1, last_arrival)
        requests.append(RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt,
                                    arrival_step=arrival, priority=rng.randint(0, 3)))
    eos = _draw_eos(rng, cfg, requests, steps)
    workload = Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=steps)
    validate(workload.config)
    return workload


def random_prefix_workload(seed: int, steps: int = 30) -> Workload:
    """A valid workload with prefix caching on, drawn from `seed` alone (its own stream:
    seed s here is unrelated to `random_workload(s)`).

    One to three prefix groups, each with a shared prompt of a few blocks (sometimes
    ending mid-block); most requests join a group, as the whole shared prompt (a fully
    cached block-aligned prompt recomputes its last block: duplicate hashes), the shared
    prompt plus a suffix of their own, or only part of it; the rest share nothing.
    Requests arrive in waves, so later ones hit blocks of requests still running (shared
    blocks) or finished (evictable blocks); short outputs finish early and leave cache
    behind. Half the seeds draw a decode batch that outgrows a tight pool, so requests are
    preempted and resume by re-hitting their own blocks while the pool's reuse evicts
    cached blocks; copies of a longer grouped prompt join it later and are often preempted
    mid-prefill, then resume with a hit the num_tokens - 1 cap cuts (a duplicate). The
    config knobs are drawn as in `random_workload`. A quarter of the seeds draw a burst
    instead (`_prefix_burst`).
    """
    rng = random.Random(f"prefix:{seed}")
    if rng.random() < 0.25:
        return _prefix_burst(rng, steps)
    block_size = rng.choice((1, 2, 2, 4, 4, 4, 8, 16))
    n_groups = rng.randint(1, 3)
    shared = []
    for _ in range(n_groups):
        length = rng.randint(1, 5) * block_size
        if rng.random() < 0.3:
            length = max(1, length + rng.randint(-block_size + 1, block_size - 1))
        shared.append(min(length, 40))
    batch = rng.random() < 0.5
    n_req = rng.randint(3, 10)
    prompts: list[int] = []
    groups: list[tuple[str, int] | None] = []
    for _ in range(n_req):
        if rng.random() < 0.15:
            groups.append(None)
            prompts.append(_draw_prompt(rng))
            continue
        g = rng.randrange(n_groups)
        base = shared[g]
        kind = rng.random()
        if kind < 0.35:  # the whole shared prompt
            prompt, share = base, base
        elif kind < 0.8:  # the shared prompt and a suffix of its own
            prompt, share = base + rng.randint(1, 2 * block_size), base
        else:  # part of it, then its own tokens
            share = rng.randint(1, base)
            prompt = share + rng.randint(0, 2 * block_size)
        groups.append((f"g{g}", share))
        prompts.append(prompt)
    if batch:
        max_tokens = [rng.randint(6, 24) for _ in prompts]
        # Copies of one whole-shared block-aligned prompt join the batch later, together:
        # often preempted mid-prefill, they resume with a hit the num_tokens - 1 cap cuts.
        g = rng.randrange(n_groups)
        late = block_size * rng.randint(2, 6)
        for _ in range(rng.randint(0, 3)):
            groups.append((f"g{g}", late))
            prompts.append(late)
            max_tokens.append(rng.randint(1, 8))
    else:
        max_tokens = [rng.choice((rng.randint(1, 4), rng.randint(1, 16))) for _ in prompts]
    cfg = replace(_draw_config(rng, prompts, max_tokens, n_req if batch else 0),
                  block_size=block_size, enable_prefix_caching=True)
    cfg = _fit_pool(rng, cfg, prompts, max_tokens, groups, batch)
    if cfg.watermark == 0.0 and rng.random() < 0.3:  # watermark checks with hits, often
        cfg = replace(cfg, watermark=rng.choice(_WATERMARKS))
    last_arrival = max(1, (2 * steps) // 3)
    late_arrival = rng.randint(2, last_arrival)
    requests: list[RequestSpec] = []
    for i, (p, mt, grp) in enumerate(zip(prompts, max_tokens, groups, strict=True)):
        if i >= n_req:  # the late copies of the decode batch
            arrival = late_arrival
        elif rng.random() < 0.45:
            arrival = 1
        elif rng.random() < 0.6:
            arrival = rng.randint(2, 6)
        else:
            arrival = rng.randint(1, last_arrival)
        group, share = grp if grp is not None else (None, 0)
        requests.append(RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt,
                                    arrival_step=arrival, priority=rng.randint(0, 3),
                                    prefix_group=group, shared_prefix_len=share))
    eos = _draw_eos(rng, cfg, requests, steps)
    workload = Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=steps)
    validate(workload.config)
    return workload


def _prefix_burst(rng: random.Random, steps: int) -> Workload:
    """Copies of one long whole-shared block-aligned prompt arriving together, prefilled in
    short chunks in a pool of about one and a half copies: each copy hits what the ones ahead
    of it cached, the pool runs out mid-prefill, and a copy preempted before its first
    output comes back to a fully cached prompt, so the num_tokens - 1 cap makes it
    recompute a cached block (a duplicate on resume)."""
    bs = rng.choice((1, 2, 4, 4, 8))
    blocks = rng.randint(3, 8)
    prompt = bs * blocks
    copies = rng.randint(3, 8)
    max_tokens = [rng.randint(1, 10) for _ in range(copies)]
    prompts = [prompt] * copies
    cfg = replace(_draw_config(rng, prompts, max_tokens, copies), block_size=bs,
                  enable_chunked_prefill=True, enable_prefix_caching=True,
                  long_prefill_token_threshold=rng.choice((bs, 2 * bs, rng.randint(1, prompt))),
                  num_gpu_blocks=blocks + rng.randint(1, max(1, blocks // 2)) + 1)
    requests = tuple(
        RequestSpec(id=f"r{i}", prompt_len=prompt, max_tokens=mt,
                    arrival_step=1 if rng.random() < 0.7 else rng.randint(2, 4),
                    priority=rng.randint(0, 3), prefix_group="g0", shared_prefix_len=prompt)
        for i, mt in enumerate(max_tokens))
    eos = _draw_eos(rng, cfg, requests, steps)
    workload = Workload(config=cfg, requests=requests, eos=tuple(eos), steps=steps)
    validate(workload.config)
    return workload


def random_async_workload(seed: int, steps: int = 30) -> Workload:
    """A valid workload for the AsyncScheduler (async scheduling on, prefix caching off),
    drawn from `seed` alone (its own stream).

    Two fifths of the seeds draw the synchronous mode's mix (`random_workload`) with async
    scheduling on; the others a decode batch timed to the block boundaries
    (`_async_batch`), where the one-step-late output matters most.
    """
    rng = random.Random(f"async:{seed}")
    if rng.random() < 0.4:
        w = random_workload(rng.randrange(1 << 32), steps)
        return replace(w, config=replace(w.config, async_scheduling=True))
    return _async_batch(rng, steps, prefix=False)


def random_async_prefix_workload(seed: int, steps: int = 30) -> Workload:
    """A valid workload for the AsyncScheduler with prefix caching on, drawn from `seed`
    alone (its own stream): two fifths the prefix mode's mix (`random_prefix_workload`)
    with async scheduling on, the others `_async_batch` with its requests in prefix
    groups."""
    rng = random.Random(f"async+prefix:{seed}")
    if rng.random() < 0.4:
        w = random_prefix_workload(rng.randrange(1 << 32), steps)
        return replace(w, config=replace(w.config, async_scheduling=True))
    return _async_batch(rng, steps, prefix=True)


def _async_batch(rng: random.Random, steps: int, prefix: bool) -> Workload:
    """A decode batch whose EOS entries and max_tokens fall on the steps the async output
    lag shows, in a pool its decodes outgrow.

    Requests of one prompt length p arrive together and are prefilled in one step a; the
    j-th output is then sampled by schedule(a + j - 1), and schedule(a + j) computes
    position p + j - 1, which opens a new block when it is a multiple of the block size.
    A boundary output is one sampled just before such a step. An EOS there is applied by
    the update after the schedule that gave the request one more token and the new block
    it needed (A2), and with the pool exhausted that token preempts the tail: a phantom
    preemption (A7). A max_tokens there makes the request skip its boundary step
    (scheduler.py:664-677), and as the tail it is preempted with its last token in flight,
    which then finishes it from the waiting queue. Blocks freed by those finishes serve
    the later arrivals one step late. With `prefix`, the batch shares a prefix group
    (whole prompts or part), so victims resume with hits and the blocks they lose uncached
    (A5) show.
    """
    bs = rng.choice((1, 2, 2, 4, 4, 4, 8))
    n = rng.randint(2, 8)
    base = rng.randint(1, 3 * bs)
    spread = 0 if rng.random() < 0.75 else 1
    prompts = [max(1, base + rng.randint(-spread, spread)) for _ in range(n)]
    arrivals = [1 if rng.random() < 0.8 else rng.randint(2, 3) for _ in range(n)]

    def boundary_outputs(p: int) -> list[int]:
        first = (1 - p) % bs or bs
        return [first + m * bs for m in range(4)]

    max_tokens = [rng.choice(boundary_outputs(p)[:3]) if rng.random() < 0.5
                  else rng.randint(4, 24) for p in prompts]
    late = rng.randint(0, 3)  # later arrivals that wait for the batch's blocks
    for _ in range(late):
        prompts.append(rng.randint(1, 4 * bs))
        max_tokens.append(rng.randint(1, 12))
        arrivals.append(rng.randint(2, 8))
    cfg = _draw_config(rng, prompts, max_tokens, n)
    first_wave = sum(prompts[:n])
    if cfg.enable_chunked_prefill and rng.random() < 0.7:  # prefill the batch in one step
        budget = max(cfg.max_num_batched_tokens, first_wave)
        cfg = replace(cfg, max_num_batched_tokens=budget,
                      max_num_scheduled_tokens=None if cfg.max_num_scheduled_tokens is None
                      else max(cfg.max_num_scheduled_tokens, budget))
    cfg = replace(cfg, block_size=bs, async_scheduling=True, enable_prefix_caching=prefix,
                  max_num_seqs=max(cfg.max_num_seqs, n),
                  max_num_active_seqs=None if cfg.max_num_active_seqs is None
                  else max(cfg.max_num_active_seqs, n))
    if cfg.max_num_seqs > cfg.max_num_batched_tokens:
        cfg = replace(cfg, max_num_batched_tokens=cfg.max_num_seqs)
    groups: list[tuple[str, int] | None] = [None] * len(prompts)
    if prefix:
        for i, p in enumerate(prompts):
            if rng.random() < 0.8:
                groups[i] = ("g0", p if rng.random() < 0.6 else rng.randint(1, p))
    shared_blocks = max((g[1] // bs for g in groups if g is not None), default=0)
    own = sum(_cdiv(p, bs) - (g[1] // bs if g is not None else 0)
              for p, g in zip(prompts[:n], groups[:n], strict=True))
    usable = max(own + shared_blocks + rng.randint(-1, 2), _cdiv(max(prompts), bs), 1)
    cfg = replace(cfg, num_gpu_blocks=usable + 1)
    requests = []
    for i, (p, mt, a, g) in enumerate(zip(prompts, max_tokens, arrivals, groups, strict=True)):
        group, share = g if g is not None else (None, 0)
        requests.append(RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt, arrival_step=a,
                                    priority=rng.randint(0, 3), prefix_group=group,
                                    shared_prefix_len=share))
    eos: list[EosEvent] = []
    for i in range(n):
        if rng.random() < 0.5:
            j = rng.choice(boundary_outputs(prompts[i])[:3]) + rng.choice((0, 0, 0, -1, 1))
            s = arrivals[i] + j - 1
            if 1 <= s <= steps:
                eos.append(EosEvent(id=f"r{i}", step=s))
    eos += _draw_eos(rng, cfg, requests[n:], steps)
    workload = Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=steps)
    validate(workload.config)
    return workload


# ---------------------------------------------------------------- speculative decoding

#: (method, parallel_drafting) pairs each speculative mode draws, with repeats as weights.
_SPEC_METHODS_SYNC: tuple[tuple[str, bool], ...] = (
    ("ngram", False), ("ngram", False), ("ngram", False), ("draft_model", False),
    ("draft_model", False), ("draft_model", True), ("eagle", False), ("eagle", False),
    ("eagle", True), ("eagle3", False))
#: ngram is left out: vLLM refuses it with async scheduling (config/vllm.py:1563-1575).
_SPEC_METHODS_ASYNC: tuple[tuple[str, bool], ...] = tuple(
    m for m in _SPEC_METHODS_SYNC if m[0] != "ngram")


def random_spec_workload(seed: int, steps: int = 30) -> Workload:
    """A valid speculative-decoding workload for the synchronous Scheduler, prefix caching
    off, drawn from `seed` alone (its own stream); see `_spec_workload`."""
    return _spec_workload(random.Random(f"spec:{seed}"), steps, prefix=False, is_async=False)


def random_spec_prefix_workload(seed: int, steps: int = 30) -> Workload:
    """The same with prefix caching on (prefix groups as `random_prefix_workload` draws
    them, some prompts one token past a block-aligned shared prefix: padded after a hit)."""
    return _spec_workload(random.Random(f"spec-prefix:{seed}"), steps, prefix=True,
                          is_async=False)


def random_spec_async_workload(seed: int, steps: int = 30) -> Workload:
    """The same for the AsyncScheduler, prefix caching off (no ngram, no draft counts)."""
    return _spec_workload(random.Random(f"spec-async:{seed}"), steps, prefix=False,
                          is_async=True)


def random_spec_async_prefix_workload(seed: int, steps: int = 30) -> Workload:
    """The same for the AsyncScheduler with prefix caching on."""
    return _spec_workload(random.Random(f"spec-async-prefix:{seed}"), steps, prefix=True,
                          is_async=True)


def _spec_workload(rng: random.Random, steps: int, prefix: bool, is_async: bool) -> Workload:
    """Requests as the mode without speculative decoding draws them (half the seeds
    without prefix caching a decode batch of short and one-token prompts arriving in
    waves instead, `_spec_batch`), then a method and k in 1..4, then knobs that reach the
    speculative branches: a budget of a few (1 + k + draft slots) so drafts are trimmed
    and draft slots starve later requests; a pool about the first wave's prompts so
    lookahead blocks preempt; a long-prefill threshold in 1..k (a padded request cut by
    it is the scheduler.py:1372 assertion); max_model_len a few tokens past the longest
    prompt (its cap trims drafts). The environment's choices: an accepted count 0..k for
    most (request, step) pairs (the driver applies at most the drafts scheduled), and for
    ngram draft counts 0..k for some."""
    if prefix:
        base = random_prefix_workload(rng.randrange(1 << 32), steps)
    elif rng.random() < 0.5:
        base = random_workload(rng.randrange(1 << 32), steps)
    else:
        base = _spec_batch(rng, steps)
    method, parallel = rng.choice(_SPEC_METHODS_ASYNC if is_async else _SPEC_METHODS_SYNC)
    k = rng.randint(1, 4)
    cfg = replace(base.config, speculative_method=method, num_speculative_tokens=k,
                  parallel_drafting=parallel, async_scheduling=is_async,
                  disable_eagle_block_drop=(prefix and method.startswith("eagle")
                                            and rng.random() < 0.2))
    requests = list(base.requests)
    if prefix:  # one token past a block-aligned shared prefix: a hit leaves 1 (padding)
        bs = cfg.block_size
        for i, r in enumerate(requests):
            if r.prefix_group is not None and r.shared_prefix_len >= bs and rng.random() < 0.3:
                shared = r.shared_prefix_len // bs * bs
                requests[i] = replace(r, prompt_len=shared + 1, shared_prefix_len=shared)
    longest = max(r.prompt_len for r in requests)
    if rng.random() < 0.3:  # drafts meet the max_model_len cap
        cfg = replace(cfg, max_model_len=longest + rng.randint(1, 2 + 2 * k))
    ds = cfg.draft_slots
    if rng.random() < 0.45:  # tight: drafts trimmed, draft slots starve later requests
        budget = rng.randint(ds + 1, 3 * (1 + k + ds))
        cfg = replace(cfg, max_num_batched_tokens=budget, enable_chunked_prefill=True,
                      max_num_seqs=min(cfg.max_num_seqs, budget),
                      max_num_scheduled_tokens=None if rng.random() < 0.8 else rng.randint(
                          1, budget + 4))
    if rng.random() < 0.3:
        cfg = replace(cfg, long_prefill_token_threshold=rng.randint(1, k))
    if rng.random() < 0.4:  # about the first wave's prompts and their lookahead
        bs, first = cfg.block_size, min(r.arrival_step for r in requests)
        wave = sum(_cdiv(r.prompt_len, bs) for r in requests if r.arrival_step == first)
        usable = max(wave + rng.randint(-1, 2), _cdiv(longest + cfg.num_lookahead_tokens, bs))
        cfg = replace(cfg, num_gpu_blocks=usable + 1)
    cfg = _spec_valid(cfg, longest)
    accepted: list[AcceptEvent] = []
    drafts: list[DraftEvent] = []
    for r in requests:
        for step in range(r.arrival_step, steps + 1):
            if rng.random() < 0.75:
                accepted.append(AcceptEvent(id=r.id, step=step, count=rng.choice(
                    (0, k, rng.randint(0, k)))))
            if cfg.drafts_vary and not is_async and rng.random() < 0.3:
                drafts.append(DraftEvent(id=r.id, step=step, count=rng.randint(0, k)))
    workload = Workload(config=cfg, requests=tuple(requests), eos=base.eos, steps=steps,
                        accepted=tuple(accepted), drafts=tuple(drafts))
    validate(workload.config)
    return workload


def _spec_valid(cfg: Config, longest: int) -> Config:
    """`cfg` moved back within vLLM's rules after the speculative knobs (the budget above
    the draft slots, config/vllm.py:2285-2290, at least max_num_seqs and, without
    chunking, max_model_len; the threshold within max_model_len; max_num_active_seqs
    within max_num_seqs)."""
    mml = max(cfg.max_model_len, longest + 1)
    cfg = replace(cfg, max_model_len=mml,
                  max_num_batched_tokens=max(cfg.max_num_batched_tokens, cfg.draft_slots + 1),
                  long_prefill_token_threshold=min(cfg.long_prefill_token_threshold, mml))
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < mml:
        cfg = replace(cfg, enable_chunked_prefill=True)
    if cfg.max_num_seqs > cfg.max_num_batched_tokens:
        cfg = replace(cfg, max_num_seqs=cfg.max_num_batched_tokens)
    if cfg.max_num_active_seqs is not None and cfg.max_num_active_seqs > cfg.max_num_seqs:
        cfg = replace(cfg, max_num_active_seqs=cfg.max_num_seqs)
    try:
        validate(cfg)
    except InputError as exc:  # a rule the knobs cannot break: a generator bug
        raise AssertionError(f"speculative generator drew an invalid config: {exc}") from None
    return cfg


def _spec_batch(rng: random.Random, steps: int) -> Workload:
    """A decode batch of short prompts (two fifths of one token), a first wave at step 1
    and later ones while it decodes: a one-token prompt admitted beside running decodes is
    padded to 1 + k (scheduler.py:1131-1153); the batch outgrows a pool of about its
    prompts."""
    n = rng.randint(2, 8)
    prompts = [1 if rng.random() < 0.4 else rng.randint(2, 8) for _ in range(n)]
    max_tokens = [rng.randint(4, 24) for _ in range(n)]
    arrivals = [1 if rng.random() < 0.6 else rng.randint(2, 10) for _ in range(n)]
    for _ in range(rng.randint(0, 2)):  # a longer prompt joins later
        prompts.append(rng.randint(8, 40))
        max_tokens.append(rng.randint(1, 8))
        arrivals.append(rng.randint(2, max(2, (2 * steps) // 3)))
    cfg = _draw_config(rng, prompts, max_tokens, n)
    requests = tuple(RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt, arrival_step=a,
                                 priority=rng.randint(0, 3))
                     for i, (p, mt, a) in enumerate(zip(prompts, max_tokens, arrivals,
                                                        strict=True)))
    eos = _draw_eos(rng, cfg, requests, steps)
    return Workload(config=cfg, requests=requests, eos=tuple(eos), steps=steps)


#: What the connector mode's runs reach, read from their records (`connector_run_features`).
CONNECTOR_RUN_FEATURES: tuple[str, ...] = (
    "connector:sync_hit_admitted",
    "connector:async_load_started",
    "connector:async_load_admitted",
    "connector:full_prompt_load_cut_to_n_minus_1",
    "connector:load_failed_error",
    "connector:load_blocked_behind_reservation",
    "connector:aborted_while_loading",
    "connector:sync_full_hit_assertion",
    "connector:preempted_then_reloaded",
    "connector:failed_load_to_recompute",
)


def random_connector_workload(seed: int, steps: int = 30) -> Workload:
    """A valid workload with the KV connector on, drawn from `seed` alone (its own stream;
    see the module doc)."""
    rng = random.Random(f"connector-{seed}")
    n_req = rng.randint(1, 8)
    prompts = [_draw_prompt(rng) for _ in range(n_req)]
    max_tokens = [rng.choice((rng.randint(1, 6), rng.randint(1, 24))) for _ in prompts]
    cfg = replace(_draw_config(rng, prompts, max_tokens, 0), kv_connector=True)
    last_arrival = max(1, (2 * steps) // 3)
    requests = [RequestSpec(id=f"r{i}", prompt_len=p, max_tokens=mt,
                            arrival_step=1 if rng.random() < 0.55 else
                            rng.randint(1, last_arrival), priority=rng.randint(0, 3))
                for i, (p, mt) in enumerate(zip(prompts, max_tokens, strict=True))]
    eos = _draw_eos(rng, cfg, requests, steps)
    workload = Workload(config=cfg, requests=tuple(requests), eos=tuple(eos), steps=steps)
    return _with_connector(rng, workload, seed)


def random_connector_prefix_workload(seed: int, steps: int = 30) -> Workload:
    """The prefix-caching mode's workload (`random_prefix_workload`: shared prefixes,
    real token ids) with the KV connector on and its hits, loads and aborts drawn as in
    `random_connector_workload` (their own stream)."""
    workload = random_prefix_workload(seed, steps)
    workload = replace(workload, config=replace(workload.config, kv_connector=True))
    return _with_connector(random.Random(f"connector-prefix-{seed}"), workload, seed)


def random_connector_async_workload(seed: int, steps: int = 30) -> Workload:
    """The async+prefix mode's workload (`random_async_prefix_workload`: the
    AsyncScheduler, prefix caching on), or for odd seeds the async mode's (prefix caching
    off), with the KV connector on and its hits, loads and aborts drawn as in
    `random_connector_workload` (their own stream)."""
    make = random_async_prefix_workload if seed % 2 else random_async_workload
    workload = make(seed, steps)
    workload = replace(workload, config=replace(workload.config, kv_connector=True))
    return _with_connector(random.Random(f"connector-async-{seed}"), workload, seed)


def _with_connector(rng: random.Random, workload: Workload, seed: int) -> Workload:
    """`workload` with external hits for most requests, load reports for the async ones
    and, for half the seeds, client aborts (see the module doc)."""
    from checker.conformance.aborts import with_aborts  # aborts imports only core types

    if rng.random() < 0.4:  # a failed load is loaded or computed again
        workload = replace(workload, config=replace(workload.config,
                                                    kv_load_failure_policy="recompute"))
    cfg, steps = workload.config, workload.steps
    hits: list[ExternalHit] = []
    loads: list[KVLoadEvent] = []
    for r in workload.requests:
        if rng.random() < 0.25:
            continue
        hit = ExternalHit(id=r.id, tokens=_draw_hit(rng, r.prompt_len, cfg.block_size),
                          load_async=rng.random() < 0.65)
        if not hit.load_async and hit.tokens == r.prompt_len and rng.random() < 0.7:
            hit = replace(hit, tokens=r.prompt_len - 1)  # keep most runs alive
        hits.append(hit)
        if hit.load_async:
            for _ in range(rng.randint(1, 3)):
                step = r.arrival_step + rng.randint(0, 8)
                if step <= steps:
                    loads.append(KVLoadEvent(id=r.id, step=step, failed=rng.random() < 0.2))
    loads.sort(key=lambda e: e.step)
    workload = replace(workload, kv_hits=tuple(hits), kv_loads=tuple(_first_per_step(loads)))
    if rng.random() < 0.5:
        workload = with_aborts(workload, seed)
    validate(workload.config)
    return workload


HYBRID_STATIC_FEATURES: tuple[str, ...] = (
    "kv:full_and_sliding", "kv:sliding_only", "kv:full_and_mamba", "kv:mamba_only",
    "kv:several_groups_of_a_kind", "kv:window_under_a_block", "kv:pool_at_startup_minimum",
    "kv:admission_cap_binds", "kv:mamba_speculative_blocks", "kv:window_lookahead",
    "kv:async",
)
HYBRID_RUN_FEATURES: tuple[str, ...] = (
    "hybrid:window_freed",  # a running request's sliding-window blocks fell
    "hybrid:preempted",  # a preemption with several groups' blocks
)


def random_hybrid_swa_workload(seed: int, steps: int = 30) -> Workload:
    """A workload with sliding-window KV cache groups (one to three, beside zero to two
    full-attention ones) for the synchronous Scheduler, prefix caching off, drawn from
    `seed` alone (its own stream); see `_hybrid_workload`."""
    return _hybrid_workload(random.Random(f"hybrid-swa:{seed}"), steps, GROUP_SLIDING,
                            spec=False, is_async=False)


def random_hybrid_swa_async_workload(seed: int, steps: int = 30) -> Workload:
    """The same for the AsyncScheduler (two batches in flight: a larger admission cap),
    with Mamba groups in a third of the seeds."""
    rng = random.Random(f"hybrid-async:{seed}")
    kind = GROUP_MAMBA if rng.random() < 1 / 3 else GROUP_SLIDING
    return _hybrid_workload(rng, steps, kind, spec=False, is_async=True)


def random_hybrid_swa_spec_workload(seed: int, steps: int = 30) -> Workload:
    """Sliding-window groups with speculative decoding (the synchronous Scheduler): EAGLE's
    and draft models' lookahead slots reach past the window's admission cap."""
    return _hybrid_workload(random.Random(f"hybrid-swa-spec:{seed}"), steps, GROUP_SLIDING,
                            spec=True, is_async=False)


def random_hybrid_mamba_workload(seed: int, steps: int = 30) -> Workload:
    """A workload with Mamba groups (one or two, beside zero to two full-attention ones),
    mamba_cache_mode "none", no speculative decoding."""
    return _hybrid_workload(random.Random(f"hybrid-mamba:{seed}"), steps, GROUP_MAMBA,
                            spec=False, is_async=False)


def random_hybrid_mamba_spec_workload(seed: int, steps: int = 30) -> Workload:
    """Mamba groups with speculative decoding (the synchronous Scheduler): each request's
    1 + k state blocks per Mamba group."""
    return _hybrid_workload(random.Random(f"hybrid-mamba-spec:{seed}"), steps, GROUP_MAMBA,
                            spec=True, is_async=False)


def random_hybrid_mamba_align_workload(seed: int, steps: int = 30) -> Workload:
    """Mamba groups in align mode (prefix caching on, shared prefixes as mode prefix
    draws them), the synchronous Scheduler, no speculative decoding."""
    return _hybrid_workload(random.Random(f"hybrid-mamba-align:{seed}"), steps, GROUP_MAMBA,
                            spec=False, is_async=False, align=True)


def random_hybrid_mamba_align_spec_workload(seed: int, steps: int = 30) -> Workload:
    """Mamba groups in align mode with speculative decoding (drafts counted in the
    position-indexed table), the synchronous Scheduler."""
    return _hybrid_workload(random.Random(f"hybrid-mamba-align-spec:{seed}"), steps,
                            GROUP_MAMBA, spec=True, is_async=False, align=True)


def random_hybrid_mamba_align_async_workload(seed: int, steps: int = 30) -> Workload:
    """Mamba groups in align mode under the AsyncScheduler (processed tokens lag one
    batch), with speculative decoding (draft_model, eagle, eagle3) in two seeds of three."""
    rng = random.Random(f"hybrid-mamba-align-async:{seed}")
    return _hybrid_workload(rng, steps, GROUP_MAMBA, spec=rng.random() < 2 / 3,
                            is_async=True, align=True)


def _hybrid_workload(rng: random.Random, steps: int, kind: str, spec: bool,
                     is_async: bool, align: bool = False) -> Workload:
    """Requests as `random_workload` (or, with `spec`, `_spec_workload` without prefix
    caching) draws them, then KV cache groups of `kind` beside full-attention ones, windows
    from under a block to a few blocks, and a pool from the startup minimum (one request
    of max_model_len over every group) to the first wave's blocks over every group, so
    that windows free blocks, the admission cap binds and decodes preempt. With `align`
    (Mamba groups only): prefix caching on and requests as the prefix modes draw them
    (shared prefixes, preempted requests re-hitting their own blocks), which puts the Mamba
    groups in align mode."""
    if spec:
        base = _spec_workload(rng, steps, prefix=align, is_async=is_async)
    elif align and is_async:
        base = random_async_prefix_workload(rng.randrange(1 << 32), steps)
    elif align:
        base = random_prefix_workload(rng.randrange(1 << 32), steps)
    else:
        base = random_workload(rng.randrange(1 << 32), steps)
    cfg = replace(base.config, enable_prefix_caching=align, async_scheduling=is_async)
    bs = cfg.block_size
    full = rng.choice((0, 1, 1, 1, 2))
    if kind == GROUP_SLIDING:
        windows = [rng.choice((1, max(1, bs - 1), bs, bs + 1, 2 * bs, rng.randint(1, 40)))
                   for _ in range(rng.choice((1, 1, 2, 3)))]
        if rng.random() < 0.5:  # several groups of one layer type share the window
            windows = [windows[0]] * len(windows)
        groups = ((KvGroup(),) * full
                  + tuple(KvGroup(GROUP_SLIDING, w) for w in windows))
    else:
        groups = (KvGroup(),) * full + (KvGroup(GROUP_MAMBA),) * rng.choice((1, 1, 2))
    cfg = replace(cfg, kv_cache_groups=groups)
    minimum = sum(cfg.group_blocks_per_request(g) for g in groups)
    first = min(r.arrival_step for r in base.requests)

    def blocks(prompt: int) -> int:
        return sum(min(_cdiv(prompt, bs), cfg.sliding_window_cap(g.sliding_window))
                   if g.kind == GROUP_SLIDING else
                   cfg.group_blocks_per_request(g) if g.kind == GROUP_MAMBA
                   else _cdiv(prompt, bs) for g in groups)
    wave = sum(blocks(r.prompt_len) for r in base.requests if r.arrival_step == first)
    biggest = max(blocks(r.prompt_len) for r in base.requests)
    pressure = rng.random()
    if pressure < 0.3:
        usable = minimum
    elif pressure < 0.7:
        usable = max(biggest, wave + rng.randint(-2, 3))
    else:
        usable = max(biggest, minimum + rng.randint(0, 3 * len(groups)))
    cfg = replace(cfg, num_gpu_blocks=usable + 1)
    workload = replace(base, config=cfg)
    validate(workload.config)
    return workload


def _draw_hit(rng: random.Random, prompt_len: int, block_size: int) -> int:
    """An external hit of a prompt: whole blocks of it, the prompt less one token, all of
    it, or any share."""
    kind = rng.random()
    if kind < 0.4:
        return min(prompt_len, block_size * rng.randint(0, prompt_len // block_size + 1))
    if kind < 0.6:
        return max(0, prompt_len - 1)
    if kind < 0.8:
        return prompt_len
    return rng.randint(0, prompt_len)


def _first_per_step(loads: Sequence[KVLoadEvent]) -> list[KVLoadEvent]:
    """One load report per (request, step): the first drawn."""
    seen: set[tuple[str, int]] = set()
    out = []
    for e in loads:
        if (e.id, e.step) not in seen:
            seen.add((e.id, e.step))
            out.append(e)
    return out


def connector_run_features(w: Workload, records: Sequence[StepRecord]) -> set[str]:
    """The CONNECTOR_RUN_FEATURES one run shows, read from its records: a request listed
    waiting with computed tokens it was never scheduled is loading (async); an admission
    whose computed tokens exceed what it is scheduled came with a hit."""
    hits = {h.id: h for h in w.kv_hits}
    specs = {r.id: r for r in w.requests}
    out: set[str] = set()
    loading: set[str] = set()
    preempted: set[str] = set()
    for rec in records:
        computed = dict(rec.num_computed_tokens)
        scheduled = dict(rec.scheduled)
        if dict(rec.extra).get("assertion") and any(
                hits.get(rid) and hits[rid].tokens == specs[rid].prompt_len
                for rid in rec.admitted):
            out.add("connector:sync_full_hit_assertion")
        for rid in rec.admitted + rec.resumed:
            hit = hits.get(rid)
            if hit is None or rid not in computed:
                continue
            if rid in loading:
                out.add("connector:async_load_admitted")
                if scheduled.get(rid) == 1 and hit.tokens == specs[rid].prompt_len:
                    out.add("connector:full_prompt_load_cut_to_n_minus_1")
                if rid in preempted:
                    out.add("connector:preempted_then_reloaded")
            elif computed[rid] > scheduled.get(rid, 0) and not hit.load_async:
                out.add("connector:sync_hit_admitted")
        for rid in rec.waiting:
            if computed.get(rid, 0) > 0 and rid not in loading and rid not in rec.preempted:
                loading.add(rid)
                out.add("connector:async_load_started")
        if any(rid in loading for rid in rec.waiting) and len(rec.waiting) > len(loading):
            out.add("connector:load_blocked_behind_reservation")
        held = dict(rec.extra).get("kv_held", {})
        if any(computed.get(rid) == 0 and held.get(rid) for rid in rec.waiting):  # type: ignore[union-attr]
            out.add("connector:failed_load_to_recompute")  # policy recompute, not taken up
        for rid, reason in rec.finished:
            if reason == FINISH_ERROR:
                out.add("connector:load_failed_error")
            elif reason == FINISH_ABORT and rid in loading and rid not in rec.running:
                out.add("connector:aborted_while_loading")
        preempted |= set(rec.preempted)
        loading -= {*rec.admitted, *rec.resumed, *(rid for rid, _ in rec.finished)}
    return out


def hybrid_features(w: Workload) -> set[str]:
    """The HYBRID_STATIC_FEATURES workload `w` has."""
    cfg = w.config
    kinds = [g.kind for g in cfg.kv_cache_groups]
    out: set[str] = set()
    has_full = GROUP_FULL in kinds
    if GROUP_SLIDING in kinds:
        out.add("kv:full_and_sliding" if has_full else "kv:sliding_only")
    if GROUP_MAMBA in kinds:
        out.add("kv:full_and_mamba" if has_full else "kv:mamba_only")
        if cfg.num_spec_tokens:
            out.add("kv:mamba_speculative_blocks")
    if len(kinds) > len(set(kinds)):
        out.add("kv:several_groups_of_a_kind")
    windows = [g.sliding_window for g in cfg.kv_cache_groups if g.kind == GROUP_SLIDING]
    if any(wdw < cfg.block_size for wdw in windows):
        out.add("kv:window_under_a_block")
    if cfg.usable_blocks == sum(cfg.group_blocks_per_request(g) for g in cfg.kv_cache_groups):
        out.add("kv:pool_at_startup_minimum")
    longest = max(r.prompt_len + r.max_tokens for r in w.requests)
    if any(cfg.sliding_window_cap(wdw) < _cdiv(min(longest, cfg.max_model_len),
                                               cfg.block_size) for wdw in windows):
        out.add("kv:admission_cap_binds")
    if windows and cfg.num_lookahead_tokens:
        out.add("kv:window_lookahead")
    if cfg.async_scheduling:
        out.add("kv:async")
    return out


def _hybrid_run_features(records: Sequence[StepRecord]) -> set[str]:
    """The HYBRID_RUN_FEATURES read from the records' `group_blocks` facts."""
    out: set[str] = set()
    before: dict[str, tuple[int, ...]] = {}
    for rec in records:
        now = dict(rec.extra).get("group_blocks")
        if not isinstance(now, dict):
            continue
        if rec.preempted:
            out.add("hybrid:preempted")
        for rid, counts in now.items():
            old = before.get(rid)
            if old is not None and any(n < o for n, o in zip(counts, old, strict=True)):
                out.add("hybrid:window_freed")
        before = dict(now)
    return out


def _fit_pool(rng: random.Random, cfg: Config, prompts: Sequence[int],
              max_tokens: Sequence[int], groups: Sequence[tuple[str, int] | None],
              batch: bool) -> Config:
    """`cfg` with a KV pool for these requests at block size `cfg.block_size`: a decode
    batch gets about its prompts' distinct blocks (a group's shared blocks once), which
    its decodes outgrow; the others ample, tight or scarce pools; never below the longest
    prompt's blocks."""
    bs, mml = cfg.block_size, cfg.max_model_len
    biggest = _cdiv(max(prompts), bs)
    need = sum(_cdiv(min(p + m, mml), bs) for p, m in zip(prompts, max_tokens, strict=True))
    pressure = rng.random()
    if batch:
        group_blocks: dict[str, int] = {}
        own = 0
        for p, grp in zip(prompts, groups, strict=True):
            shared = grp[1] // bs if grp is not None else 0
            if grp is not None:
                group_blocks[grp[0]] = max(group_blocks.get(grp[0], 0), shared)
            own += _cdiv(p, bs) - shared
        usable = own + sum(group_blocks.values()) + rng.randint(-1, 3)
    elif pressure < 0.3:
        usable = need + rng.randint(0, 4)
    elif pressure < 0.75:
        usable = int(need * rng.uniform(0.3, 0.8))
    else:
        usable = biggest + rng.randint(0, 3)
    return replace(cfg, num_gpu_blocks=max(usable, biggest, 1) + 1)  # + the null block


def _draw_prompt(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.35:
        return rng.randint(1, 4)  # decode-like
    if kind < 0.75:
        return rng.randint(5, 20)
    return rng.randint(21, 48)


def _draw_config(rng: random.Random, prompts: Sequence[int], max_tokens: Sequence[int],
                 batch: int) -> Config:
    """A valid config for these requests; `batch` > 0: the first `batch` requests are a
    decode batch (see `random_workload`)."""
    policy = POLICY_PRIORITY if rng.random() < 0.45 else POLICY_FCFS
    chunked = rng.random() < 0.7
    block_size = rng.choice(_BATCH_BLOCK_SIZES if batch else _BLOCK_SIZES)
    longest = max(prompts)
    if rng.random() < (0.6 if not chunked else 0.35):
        max_model_len = longest + rng.randint(1, 8)  # some requests end by max_model_len
    else:
        max_model_len = max(longest + 1, rng.choice((64, 96, 128)))
    budget = rng.choice(_BUDGETS)
    if not chunked:  # vllm/config/scheduler.py:315-326: budget >= max_model_len
        budget = max_model_len + rng.choice((0, 0, rng.randint(0, 16)))
    max_num_seqs = rng.randint(min(batch, budget) or 1, max(min(budget, 12), batch))
    max_num_seqs = min(max_num_seqs, budget)  # vllm/config/scheduler.py:328-333
    active = None if rng.random() < 0.75 else rng.randint(1, max_num_seqs)
    scheduled = None if rng.random() < 0.7 else rng.choice(
        (rng.randint(max(1, budget // 2), budget), rng.randint(budget + 1, budget + 16),
         rng.randint(budget + 1, budget + 16)))
    threshold = 0 if rng.random() < 0.45 else rng.randint(1, min(max_model_len, 24))
    adaptive = rng.random() < 0.4
    watermark = 0.0 if rng.random() < 0.65 else rng.choice(_WATERMARKS)
    full_isl = rng.random() < 0.75
    need = sum(_cdiv(min(p + m, max_model_len), block_size)
               for p, m in zip(prompts, max_tokens, strict=True))
    biggest_prompt = _cdiv(longest, block_size)
    pressure = rng.random()
    if batch:  # about the first wave's prompts: the batch outgrows it while decoding
        usable = max(biggest_prompt,
                     sum(_cdiv(p, block_size) for p in prompts[:batch]) + rng.randint(-1, 3))
    elif pressure < 0.35:  # ample: every request can hold its whole sequence at once
        usable = need + rng.randint(0, 4)
    elif pressure < 0.75:  # tight: decodes outgrow the pool -> preemption
        usable = max(biggest_prompt, int(need * rng.uniform(0.4, 0.9)))
    else:  # scarce: about one long prompt's worth
        usable = max(1, biggest_prompt + rng.randint(-1, 3))
    return Config(
        max_num_batched_tokens=budget,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
        num_gpu_blocks=usable + 1,  # + vLLM's null block
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=threshold,
        long_prefill_token_threshold_adaptive=adaptive,
        policy=policy,
        watermark=watermark,
        scheduler_reserve_full_isl=full_isl,
        max_num_active_seqs=active,
        max_num_scheduled_tokens=scheduled,
    )


def _draw_eos(rng: random.Random, cfg: Config, requests: Sequence[RequestSpec],
              steps: int) -> list[EosEvent]:
    """EOS entries inside each chosen request's plausible decode window (see module doc)."""
    eos: list[EosEvent] = []
    for r in requests:
        if rng.random() >= 0.4:
            continue
        chunk = cfg.long_prefill_token_threshold or cfg.max_num_batched_tokens
        first = r.arrival_step + _cdiv(r.prompt_len, max(1, chunk)) - 1
        last = first + r.max_tokens + 3
        for s in sorted(set(rng.randint(first, last) for _ in range(rng.randint(1, 2)))):
            if 1 <= s <= steps:
                eos.append(EosEvent(id=r.id, step=s))
    return eos


def workload_features(w: Workload) -> frozenset[str]:
    """The `STATIC_FEATURES` (and, with prefix caching on, `PREFIX_STATIC_FEATURES`) that
    workload `w` has."""
    cfg = w.config
    out = {f"policy:{cfg.policy}",
           "chunked_prefill:on" if cfg.enable_chunked_prefill else "chunked_prefill:off"}
    if cfg.long_prefill_token_threshold == 0:
        out.add("long_prefill:off")
    elif cfg.long_prefill_token_threshold_adaptive:
        out.add("long_prefill:adaptive")
    else:
        out.add("long_prefill:fixed")
    if cfg.watermark_blocks > 0:
        out.add("watermark:on")
    if not cfg.scheduler_reserve_full_isl:
        out.add("full_isl:off")
    need = sum(_cdiv(min(r.prompt_len + r.max_tokens, cfg.max_model_len), cfg.block_size)
               for r in w.requests)
    out.add("pool:ample" if cfg.usable_blocks >= need else "pool:scarce")
    if cfg.max_num_active_seqs is not None:
        out.add("max_num_active_seqs:set")
    if cfg.max_num_scheduled_tokens is not None:
        out.add("max_num_scheduled_tokens:set")
    if any(r.arrival_step > 1 for r in w.requests):
        out.add("arrivals:later")
    if w.eos:
        out.add("eos:entries")
    if any(r.prompt_len + r.max_tokens > cfg.max_model_len for r in w.requests):
        out.add("length:model_len_reachable")
    if cfg.enable_prefix_caching:
        out |= _prefix_features(w)
    if cfg.num_spec_tokens:
        out |= _spec_features(w)
    if cfg.hybrid_kv:
        out |= hybrid_features(w)
    return frozenset(out)


def _spec_features(w: Workload) -> set[str]:
    cfg = w.config
    k, ds = cfg.num_spec_tokens, cfg.draft_slots
    method = cfg.speculative_method
    out = {f"spec:method:{method}_parallel" if cfg.parallel_drafting and method == "draft_model"
           else f"spec:method:{method}"}
    if cfg.num_lookahead_tokens:
        out.add("spec:lookahead")
    if ds:
        out.add("spec:draft_slots")
    if 1 <= cfg.long_prefill_token_threshold <= k:
        out.add("spec:threshold_le_k")
    if cfg.max_num_batched_tokens < 2 * (1 + k + ds):
        out.add("spec:budget_tight")
    if any(r.prompt_len + r.max_tokens > cfg.max_model_len for r in w.requests):
        out.add("spec:model_len_tight")
    if any(e.count < k for e in w.drafts):
        out.add("spec:drafts_fewer_than_k")
    return out


def _prefix_features(w: Workload) -> set[str]:
    bs = w.config.block_size
    out: set[str] = set()
    members: dict[str, list[RequestSpec]] = {}
    for r in w.arrival_order():
        if r.prefix_group is None:
            out.add("prefix:ungrouped")
            continue
        members.setdefault(r.prefix_group, []).append(r)
        if r.shared_prefix_len == r.prompt_len and r.prompt_len % bs == 0:
            out.add("prefix:whole_prompt_shared_block_aligned")
        if r.shared_prefix_len % bs:
            out.add("prefix:shared_mid_block")
        if r.shared_prefix_len < bs:
            out.add("prefix:shared_under_a_block")
    for group in members.values():
        if len(group) >= 2:
            out.add("prefix:group_of_several")
        if group[-1].arrival_step > group[0].arrival_step:
            out.add("prefix:group_arrives_later")
    return out


def run_features(w: Workload, records: Iterable[StepRecord],
                 events: Iterable[frozenset[str]] = ()) -> frozenset[str]:
    """The `RUN_FEATURES` that one run of `w` (its StepRecords) shows and, with prefix
    caching on, its `PREFIX_RUN_FEATURES`, with async scheduling its `ASYNC_RUN_FEATURES`
    (and with both its `ASYNC_PREFIX_RUN_FEATURES`): from the records' extra facts and
    from `events`, the per-step events the real engine's probes noted (`RealRun.events`).

    A chunk samples when the record's `sampled` fact (async) lists it; synchronously, when
    it brings `num_computed_tokens` up to the prompt and the outputs so far."""
    records = tuple(records)
    events = tuple(events)
    specs = {r.id: r for r in w.requests}
    budget = w.config.token_budget
    out: set[str] = set()
    outputs: dict[str, int] = {}
    for rec in records:
        if rec.admitted:
            out.add("admitted")
        if rec.resumed:
            out.add("resumed")
        if rec.preempted:
            out.add("preempted")
        if len(rec.preempted) >= 2:
            out.add("preempted:several_in_one_step")
        if rec.scheduled and sum(n for _, n in rec.scheduled) == budget:
            out.add("budget:exhausted")
        computed = dict(rec.num_computed_tokens)
        samples = dict(rec.extra).get("sampled")
        for rid, _ in rec.scheduled:
            if isinstance(samples, tuple):
                partial = rid not in samples
            else:
                partial = rid in computed and computed[rid] < (specs[rid].prompt_len
                                                               + outputs.get(rid, 0))
            if partial:
                out.add("chunked:partial_prefill")
            elif rid in computed:
                outputs[rid] = outputs.get(rid, 0) + 1
        if (rec.waiting and not rec.admitted and not rec.resumed and not rec.preempted
                and rec.token_budget_left > 0):
            out.add("waiting:not_admitted_with_budget_left")
        for rid, reason in rec.finished:
            if reason == FINISH_STOP:
                out.add("finished:stop")
            elif reason == FINISH_LENGTH:
                if outputs.get(rid, 0) >= specs[rid].max_tokens:
                    out.add("finished:length:max_tokens")
                else:
                    out.add("finished:length:model_len")
    probed = set().union(*events)
    if w.config.enable_prefix_caching:
        out |= _prefix_run_features(w, records)
        out |= probed & set(PROBED_FEATURES)
    if w.config.async_scheduling:
        out |= _async_run_features(records)
        out |= probed & set(ASYNC_PROBED_FEATURES)
    if w.config.num_spec_tokens:
        out |= _spec_run_features(w, records)
        out |= probed & set(SPEC_PROBED_FEATURES)
    if w.config.kv_connector:
        out |= connector_run_features(w, records)
    if w.config.hybrid_kv:
        out |= _hybrid_run_features(records)
    return frozenset(out)


def _spec_run_features(w: Workload, records: Sequence[StepRecord]) -> set[str]:
    """The SPEC_RUN_FEATURES (and SPEC_PREFIX_RUN_FEATURES) read from the records: their
    `spec_scheduled` and `accepted` facts (the accepted counts of that step's schedule),
    `assertion`, the budgets and the prefix hits. Draft-slot starvation: a step whose
    schedule left token budget but no input budget past the draft slots
    (max_num_batched_tokens - sum(n + draft slots) <= draft slots, scheduler.py:661, 918)
    while a running or waiting request got nothing."""
    cfg = w.config
    ds = cfg.draft_slots
    out: set[str] = set()
    finishing: dict[str, int] = {}  # sync: this step's accepted; async: the previous one's
    previous: dict[str, int] = {}  # the previous schedule's spec_scheduled
    for rec in records:
        facts = dict(rec.extra)
        if "assertion" in facts:
            out.add("spec:assertion")
            continue
        spec = facts.get("spec_scheduled")
        accepted = facts.get("accepted")
        spec = spec if isinstance(spec, dict) else {}
        accepted = accepted if isinstance(accepted, dict) else {}
        if spec:
            out.add("spec:drafts_scheduled")
        entering = {*rec.admitted, *rec.resumed}
        hits = facts.get("prefix_hits")
        hits = hits if isinstance(hits, dict) else {}
        for rid, s in spec.items():
            a = accepted.get(rid, 0)
            if rid in entering:
                out.add("spec:padded")
                if hits.get(rid, 0) > 0:
                    out.add("spec:padded_after_hit")
                continue
            if a > 0:
                out.add("spec:accepted_some")
            if a == s:
                out.add("spec:accepted_all")
            if a < s:
                out.add("spec:rejected_some")
        if not cfg.async_scheduling:
            finishing = accepted
        if any(finishing.get(rid, 0) > 0 for rid, _ in rec.finished):
            out.add("spec:finished_with_accepted")
        if cfg.async_scheduling:
            finishing = accepted
        if rec.preempted:
            out.add("spec:preempted")
            if cfg.async_scheduling and any(rid in previous for rid in rec.preempted):
                out.add("spec:stale_drafts")
        previous = spec
        scheduled = dict(rec.scheduled)
        used = sum(n + ds for n in scheduled.values())
        unserved = [r for r in (*rec.running, *rec.waiting) if r not in scheduled]
        if (ds and scheduled and rec.token_budget_left > 0
                and cfg.max_num_batched_tokens - used <= ds and unserved):
            out.add("spec:draft_slot_starvation")
    return out


def _async_run_features(records: Sequence[StepRecord]) -> set[str]:
    """The ASYNC_RUN_FEATURES read from the records. Record k's `finished` comes from
    update_from_output(k-1), which runs after schedule(k): a request scheduled in record k
    and finished there was given a token after its last one; a victim of record k finished
    there was finished by its stale token."""
    out: set[str] = set()
    previous: StepRecord | None = None
    for k, rec in enumerate(records):
        finished = dict(rec.finished)
        scheduled = dict(rec.scheduled)
        if any(finished.get(rid) == FINISH_STOP for rid in scheduled):
            out.add("async:eos_one_step_late")
        if (finished and rec.waiting and not rec.admitted and not rec.resumed
                and not rec.preempted and k + 1 < len(records)
                and (records[k + 1].admitted or records[k + 1].resumed)):
            out.add("async:freed_blocks_next_step")
        if previous is not None:
            before = dict(previous.scheduled)
            sampled = dict(previous.extra).get("sampled")
            sampled = sampled if isinstance(sampled, tuple) else ()
            for rid in rec.preempted:
                if rid in before:
                    out.add("async:preempted_in_flight")
                if rid in sampled:
                    out.add("async:stale_token")
                    if rid in finished:
                        out.add("async:stale_finish")
        previous = rec
    return out


def _prefix_run_features(w: Workload, records: Sequence[StepRecord]) -> set[str]:
    """The PREFIX_RUN_FEATURES read from the records' cache facts. After schedule() each
    running request holds cdiv(num_computed_tokens, block_size) blocks, so more than
    `blocks_in_use` in all means a block held twice."""
    bs = w.config.block_size
    out: set[str] = set()
    for rec in records:
        facts = dict(rec.extra)
        hits = facts.get("prefix_hits")
        if isinstance(hits, dict) and any(hits.values()):
            out.add("prefix:hit")
            if any(hits.get(rid, 0) for rid in rec.resumed):
                out.add("prefix:hit_resumed")
        computed = dict(rec.num_computed_tokens)
        held = sum(_cdiv(computed[rid], bs) for rid in rec.running)
        in_use = facts.get("blocks_in_use")
        if isinstance(in_use, int) and held > in_use:
            out.add("prefix:shared_blocks_held")
    return out


# ---------------------------------------------------------------- configs for validation

#: The SchedulerConfig rules `random_any_config` can break, by name in model.vllm_config.RULES.
BREAKABLE_RULES: tuple[str, ...] = (
    "batched_tokens_ge_model_len_without_chunking",
    "batched_tokens_ge_num_seqs",
    "active_seqs_le_num_seqs",
    "long_prefill_threshold_le_model_len",
    "positive_fields",
    "watermark_range",
    "policy_known",
)


#: The speculative-decoding config rules (model.vllm.validation.RULES) are SpeculativeConfig's
#: and VllmConfig's, not SchedulerConfig's, so `random_any_config` does not break them;
#: tests/test_conformance_spec.py checks them against a real VllmConfig.
SPEC_CONFIG_RULES: tuple[str, ...] = ("speculative_tokens_positive",
                                      "batched_tokens_gt_draft_slots")


def random_any_config(seed: int) -> Config:
    """A config that breaks zero (about a quarter of seeds), one or two SchedulerConfig
    rules. Fields vLLM's SchedulerConfig does not own (block_size, num_gpu_blocks) stay
    valid, and max_model_len stays positive, so only SchedulerConfig decides."""
    rng = random.Random(seed)
    mml = rng.choice((16, 32, 64, 128, 2048))
    cfg = Config(
        max_num_batched_tokens=rng.choice((16, 32, 64, 128, 256, 2048)),
        max_num_seqs=rng.randint(1, 16),
        max_model_len=mml,
        enable_chunked_prefill=rng.random() < 0.6,
        long_prefill_token_threshold=rng.choice((0, 0, rng.randint(1, mml))),
        long_prefill_token_threshold_adaptive=rng.random() < 0.3,
        policy=rng.choice((POLICY_FCFS, POLICY_PRIORITY)),
        watermark=rng.choice((0.0, 0.0, 0.1, 0.5)),
        scheduler_reserve_full_isl=rng.random() < 0.7,
    )
    if not cfg.enable_chunked_prefill and cfg.max_num_batched_tokens < mml:
        cfg = replace(cfg, max_num_batched_tokens=mml)
    if rng.random() < 0.3:
        cfg = replace(cfg, max_num_active_seqs=rng.randint(1, cfg.max_num_seqs))
    if rng.random() < 0.2:
        cfg = replace(cfg, max_num_scheduled_tokens=rng.randint(1, cfg.max_num_batched_tokens))
    n_breaks = rng.choice((0, 1, 1, 1, 2))
    for rule in rng.sample(BREAKABLE_RULES, n_breaks):
        cfg = _break(rng, cfg, rule)
    return cfg


def _break(rng: random.Random, cfg: Config, rule: str) -> Config:
    """`cfg` changed so that it breaks `rule` (it may break others too)."""
    if rule == "batched_tokens_ge_model_len_without_chunking":
        return replace(cfg, enable_chunked_prefill=False,
                       max_num_batched_tokens=rng.randint(1, cfg.max_model_len - 1))
    if rule == "batched_tokens_ge_num_seqs":
        tokens = rng.randint(1, 16)
        return replace(cfg, max_num_batched_tokens=tokens,
                       max_num_seqs=tokens + rng.randint(1, 16))
    if rule == "active_seqs_le_num_seqs":
        return replace(cfg, max_num_active_seqs=cfg.max_num_seqs + rng.randint(1, 8))
    if rule == "long_prefill_threshold_le_model_len":
        return replace(cfg, long_prefill_token_threshold=cfg.max_model_len + rng.randint(1, 64))
    if rule == "positive_fields":
        name = rng.choice(("max_num_batched_tokens", "max_num_seqs", "max_num_scheduled_tokens",
                           "max_num_active_seqs", "long_prefill_token_threshold"))
        value = -rng.randint(1, 3) if name == "long_prefill_token_threshold" else rng.choice(
            (0, -1))
        return replace(cfg, **{name: value})
    if rule == "watermark_range":
        return replace(cfg, watermark=rng.choice((1.0, 1.5, -0.1)))
    if rule == "policy_known":
        return replace(cfg, policy=rng.choice(("lifo", "FCFS", "")))
    raise ValueError(f"unknown rule {rule!r}; choose one of {BREAKABLE_RULES}")
