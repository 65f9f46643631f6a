"""vLLM V0 (0.10.2) swap preemption (`preemption_mode="swap"`): the reference on hand-computed
workloads, observe, and the methods (BMC and the explorer both decide a swap config;
k-induction's invariant covers it, tests/test_vllm_v0_invariant.py).

Every expected number is derived below from 0.10.2's code (S = vllm/core/scheduler.py,
BM = vllm/core/block_manager.py, BT = vllm/core/block/block_table.py). The counts used:
- a decode's append touches 1 block, worst-case (BT:361-379), so it needs 1 free block;
- a swap touches the table's full blocks plus the blocks its unseen tokens touch
  (BM:454-500 `_can_swap`, naive_block.py:288-307), against the CPU pool to go out (no
  watermark) and the GPU less the watermark to come in; every block, full or not, moves.
The workloads are tests/vllm_v0_hand.py's SWAP_* (tests/test_vllm_v0_refinement.py runs
them on the rules too). Each was also run on the real Scheduler
(checker.conformance.vllm_v0_real --workload): every step agrees.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_v0_hand import SWAP_CHUNKED, SWAP_CHUNKED_LONG, SWAP_CRASH, SWAP_DEFAULT, workload

from checker.cli.main import main
from model.core.errors import InputError
from model.vllm_v0.config import Config, parse_config
from model.vllm_v0.engine import ENGINE, observe
from model.vllm_v0.reference import simulate

SWAP = {"preemption_mode": "swap"}


def _row(rec):  # type: ignore[no-untyped-def]
    extra = dict(rec.extra)
    return (rec.scheduled, rec.preempted, rec.resumed, rec.running, rec.free_blocks,
            extra["swapped"], extra["free_cpu_blocks"])


def test_default_path_swaps_the_tail_out_and_back_in() -> None:
    recs = simulate(SWAP_DEFAULT)
    assert [_row(r) for r in recs] == [
        # 1: both prompts admitted, cdiv(3, 2) = 2 blocks each: 0 free.
        ((("r0", 3), ("r1", 3)), (), (), ("r0", "r1"), 0, (), 8),
        # 2: r0's decode needs 1 block, none free: the tail r1 is swapped out (its table, 3
        # tokens + 1 unseen: 1 full block + 1 touched = 2 <= 8 CPU blocks), its 2 blocks
        # move: GPU 2 free, CPU 6; r0 appends into its own block (table 4 tokens, 2 blocks).
        # A victim in the step: no swap-in (S:1261-1269).
        ((("r0", 1),), ("r1",), (), ("r0",), 2, ("r1",), 6),
        # 3: r0 appends (table 5, 3 blocks: 1 free). Swap-in of r1 touches 1 full + 1 = 2
        # blocks, 1 free: LATER. The waiting loop does not run while `swapped` is non-empty.
        ((("r0", 1),), (), (), ("r0",), 1, ("r1",), 6),
        # 4: table 6 tokens, still 3 blocks (1 free): r1 still LATER.
        ((("r0", 1),), (), (), ("r0",), 1, ("r1",), 6),
        # 5: table 7, 4 blocks: 0 free.
        ((("r0", 1),), (), (), ("r0",), 0, ("r1",), 6),
        # 6: r0's decode needs 1 block, none free, nothing left to preempt: r0 swaps itself
        # out (3 full + 1 touched = 4 <= 6 CPU free; 4 blocks move: GPU 4, CPU 2). It joins
        # the swapped tail, behind r1.
        ((), ("r0",), (), (), 4, ("r1", "r0"), 2),
        # 7: swap-in from the head: r1 (2 touched, 4 free: OK; 2 blocks back, CPU 4), its
        # decode appends into its second block; r0 then touches 3 full + 1 = 4 > 2: LATER.
        ((("r1", 1),), (), ("r1",), ("r1",), 2, ("r0",), 4),
        # 8: r1 appends (table 5, 3 blocks: 1 free).
        ((("r1", 1),), (), (), ("r1",), 1, ("r0",), 4),
    ]
    # A swapped group keeps its computed tokens (S:1824-1838 resets nothing): r1 computed 3
    # tokens at step 1 and comes back at step 7 with 3 + 1 = 4.
    assert dict(recs[1].num_computed_tokens)["r1"] == 3
    assert dict(recs[6].num_computed_tokens)["r1"] == 4
    assert dict(recs[5].extra)["cpu_blocks"] == (("r1", 2), ("r0", 4))


def test_observe_holds_a_swapped_request_outside_both_queues() -> None:
    steps = observe(SWAP_DEFAULT, simulate(SWAP_DEFAULT))
    r1 = [s.slots[1] for s in steps]
    # step 2: swapped out while running
    assert r1[1].preempted and r1[1].was_running and not r1[1].running_after
    assert not r1[1].waiting_after and r1[1].num_computed_tokens == 3 and r1[1].blocks == 0
    # steps 3-6: held, neither running nor waiting, computed tokens kept
    for o in r1[2:6]:
        assert o.held and not o.was_running and not o.was_waiting and o.scheduled == 0
        assert o.num_computed_tokens_before == o.num_computed_tokens == 3
    # step 7: resumed by swap-in, one decode token on its kept 3 (the 4th token computed)
    assert r1[6].resumed and not r1[6].admitted and r1[6].scheduled == 1
    assert r1[6].num_computed_tokens_before == 3 and r1[6].num_computed_tokens == 4
    assert r1[6].blocks == 2 and r1[6].sampled
    assert not any(s.assertion for s in steps)


def test_a_cpu_pool_too_small_kills_the_engine() -> None:
    recs = simulate(SWAP_CRASH)
    # 1: r0 (1 block) and r1 (2 blocks) admitted: 0 free.
    assert recs[0].scheduled == (("r0", 1), ("r1", 2 + 1)) and recs[0].free_blocks == 0
    # 2: r0's decode needs 1 block: r1 is the victim; its swap-out touches 1 full block + 1
    # for its unseen token = 2 > the CPU pool's 1: can_swap_out fails and `_swap_out` raises
    # RuntimeError (S:1829-1835). Nothing else is recorded; the GPU pool stands at 0 free.
    message = ("scheduler.py:1829 RuntimeError: Aborted due to the lack of CPU swap space "
               "(swapping out r1)")
    for rec in recs[1:]:  # the engine is dead: step 3 records the same
        assert rec.extra == (("assertion", message),)
        assert (rec.scheduled, rec.preempted, rec.finished, rec.free_blocks) == ((), (), (), 0)
    steps = observe(SWAP_CRASH, recs)
    assert [s.assertion for s in steps] == [False, True, True]
    # held as the step found them: r0 and r1 running, nothing scheduled
    assert all(o.held and o.was_running and o.scheduled == 0 for o in steps[1].slots)


def test_chunked_path_swaps_a_prefill_out_and_back_in_whole() -> None:
    recs = simulate(SWAP_CHUNKED)
    assert [_row(r) for r in recs] == [
        # 1: r0's prompt (1 block), then r1's first chunk min(6, 4 - 2) = 2, its whole
        # prompt allocated (3 blocks, S:1188): 0 free.
        ((("r0", 2), ("r1", 2)), (), (), ("r0", "r1"), 0, (), 4),
        # 2: r0's decode needs 1 block: the tail r1 (a prefill, 2 of 6 computed) is swapped
        # out: 3 full blocks + 0 touched (no unseen token, last block full) = 3 <= 4: GPU 3,
        # CPU 1. r0 takes a block (table 3 tokens, 2 blocks): 2 free.
        ((("r0", 1),), ("r1",), (), ("r0",), 2, ("r1",), 1),
        # 3: r0's third token (table 4, 2 blocks; finishes by max_tokens). Swap-in of r1
        # touches 3 > 2 free: LATER.
        ((("r0", 1),), (), (), ("r0",), 2, ("r1",), 1),
        # 4: r0 freed (4 free). r1's swap-in touches 3, 4 - 3 >= 0: OK. `_schedule_swapped`
        # is called without chunking (S:1387): its whole remaining 6 - 2 = 4 tokens, which
        # the budget takes; 3 blocks back (1 free, CPU 4). It samples.
        ((("r1", 4),), (), ("r1",), ("r1",), 1, (), 4),
        # 5: r1's decode takes the last block; it finishes by max_tokens.
        ((("r1", 1),), (), (), ("r1",), 0, (), 4),
    ]


def test_chunked_path_never_swaps_back_a_prefill_longer_than_the_budget() -> None:
    # As above with r1's prompt 8 and 5 GPU blocks: at swap-in r1 has 8 - 2 = 6 tokens
    # left, unchunked, and can_schedule(6) fails against the budget of 4 (S:890-896) at
    # every step: the engine idles with every GPU block free and r1 held forever.
    recs = simulate(SWAP_CHUNKED_LONG)
    assert recs[1].preempted == ("r1",) and dict(recs[1].extra)["free_cpu_blocks"] == 8 - 4
    for rec in recs[3:]:
        assert rec.scheduled == () and rec.free_blocks == 5
        assert dict(rec.extra)["swapped"] == ("r1",)


def test_recompute_records_are_unchanged() -> None:
    w = workload(Config(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=16,
                        block_size=2, num_gpu_blocks=4), ("r0", 3, 6, 1), ("r1", 3, 6, 1),
                 steps=3)
    recs = simulate(w)
    assert [k for k, _ in recs[1].extra] == ["ignored", "blocks"]
    assert recs[1].preempted == ("r1",) and recs[1].waiting == ("r1",)


@pytest.mark.parametrize(("raw", "fragment"), [
    ({"preemption_mode": "swapp"}, "'preemption_mode' is 'swapp'; give 'recompute'"),
    ({"num_cpu_blocks": -1}, "'num_cpu_blocks' is -1; give an integer from 0"),
    ({"num_cpu_blocks": True}, "'num_cpu_blocks' is True; give an integer"),
])
def test_bad_swap_fields_are_one_line_input_errors(raw: dict[str, object],
                                                   fragment: str) -> None:
    with pytest.raises(InputError) as err:
        parse_config(raw)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_symbolic_methods_take_a_swap_config() -> None:
    # The rules model swap preemption (tests/test_vllm_v0_refinement.py) and the invariant
    # describes it (tests/test_vllm_v0_invariant.py).
    assert ENGINE.symbolic_limit is None and ENGINE.invariant_covers is None
    assert ENGINE.rule_config(Config(**SWAP)).swaps


def _config_file(tmp_path: Path, cfg: dict[str, object]) -> str:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"engine": "vllm-v0", "config": cfg}))
    return str(path)


CRASH_CFG = {"max_num_batched_tokens": 8, "max_num_seqs": 2, "max_model_len": 8,
             "block_size": 2, "num_gpu_blocks": 3, "preemption_mode": "swap",
             "num_cpu_blocks": 1}
BOUNDS = ["--requests", "2", "--depth", "3", "--max-prompt-len", "4"]


def test_bmc_finds_the_crash_and_the_explorer_agrees(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    code = main(["check", "--engine", "vllm-v0", "--method", "both", "--config-file",
                 _config_file(tmp_path, CRASH_CFG), "--property", "no_engine_assertion",
                 *BOUNDS, "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert code == 1, out
    assert "1 of 1 checks agree" in out and out.count("VIOLATED") >= 2


def test_auto_checks_a_swap_config_by_bmc(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    # k-induction cannot prove a violated property; BMC finds the crash.
    code = main(["check", "--engine", "vllm-v0", "--config-file",
                 _config_file(tmp_path, CRASH_CFG), "--property", "no_engine_assertion",
                 *BOUNDS, "--out", str(tmp_path / "out"), "--json"])
    (row,) = json.loads(capsys.readouterr().out)["verdicts"]
    assert code == 1 and row["verdict"] == "VIOLATED" and row["method"] == "bmc"


def test_the_explorer_finds_the_crash(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--engine", "vllm-v0", "--method", "explore", "--config-file",
                 _config_file(tmp_path, CRASH_CFG), "--property", "no_engine_assertion",
                 *BOUNDS, "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "VIOLATED" in out and code == 1, out
    with_room = dict(CRASH_CFG, num_cpu_blocks=8)
    code = main(["check", "--engine", "vllm-v0", "--method", "explore", "--config-file",
                 _config_file(tmp_path, with_room), "--property", "no_engine_assertion",
                 *BOUNDS, "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert "HOLDS(3)" in out and code == 0, out
