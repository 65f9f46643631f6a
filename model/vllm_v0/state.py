"""Fixed-slot state of vLLM V0's rules (model/vllm_v0/rules.py). Every field is a Python
int/bool OR a z3 term, so one rule serves as simulator and as transition relation; the
scheduling path (default or chunked), the preemption mode and the block size are concrete.
A recompute config's state has no swap fields at all (empty tuples), so its terms and its
fresh states are what they were before swapping was modelled."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction

from model.core.ops import Bool, Ops
from model.core.rule_parts import QueueState, SlotProgress
from model.vllm_v0.config import Config

# Slot status codes. A preempted request is WAITING again (S:1795-1805 of core/scheduler.py
# sets SequenceStatus.WAITING); `num_preemptions > 0` tells a resumption from an admission.
# FINISHED covers FINISHED_STOPPED, FINISHED_LENGTH_CAPPED and FINISHED_IGNORED. SWAPPED
# (SQ:42-52) is reached only with preemption_mode "swap": the table is on the CPU pool.
ABSENT, WAITING, RUNNING, FINISHED, SWAPPED = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class RuleConfig:
    """The configuration as the rules read it: each number fixed (an int) or a z3 term.

    `enable_chunked_prefill` picks the step function's shape (S:1467-1472) and
    `block_size` keeps block arithmetic linear, so both are concrete. `watermark_blocks`
    is `int(0.01 * num_gpu_blocks)` (BM:93), a constant of the config. `swaps` (the
    preemption mode is "swap", S:1769-1770) picks the preemption rule, so it is concrete;
    `num_cpu_blocks` is the CPU swap pool (BM:72).
    """

    max_num_batched_tokens: object
    max_num_seqs: object
    max_model_len: object
    num_gpu_blocks: object
    watermark_blocks: object
    block_size: int
    enable_chunked_prefill: bool
    swaps: bool = False
    num_cpu_blocks: object = 0

    @property
    def token_budget(self) -> object:
        """The tokens one step may schedule (SchedulingBudget.token_budget, S:1227, 1360)."""
        return self.max_num_batched_tokens

    @property
    def usable_blocks(self) -> object:
        """Every GPU block: the naive allocator over `num_gpu_blocks` keeps no null block
        (BM:95-100; the reference and the real pool agree on free blocks at every step)."""
        return self.num_gpu_blocks

    @property
    def policy_priority(self) -> bool:
        """FCFS only (model/vllm_v0/config.py)."""
        return False

    @property
    def longest_prompt(self) -> object:
        """The longest prompt LLMEngine lets reach the scheduler: `max_model_len` itself
        is accepted (E:1768-1769 of engine/llm_engine.py refuses only longer ones), unlike
        V1, which refuses `prompt_len >= max_model_len`."""
        return self.max_model_len

    @staticmethod
    def from_config(cfg: Config) -> RuleConfig:
        """The concrete RuleConfig of a Config."""
        return RuleConfig(
            max_num_batched_tokens=cfg.max_num_batched_tokens, max_num_seqs=cfg.max_num_seqs,
            max_model_len=cfg.max_model_len, num_gpu_blocks=cfg.num_gpu_blocks,
            watermark_blocks=cfg.watermark_blocks, block_size=cfg.block_size,
            enable_chunked_prefill=cfg.enable_chunked_prefill, swaps=cfg.swaps,
            num_cpu_blocks=cfg.num_cpu_blocks)


@dataclass(frozen=True, slots=True)
class SlotState(SlotProgress):
    """One request slot between two steps.

    `table_tokens` is the tokens its block table holds (0: no table), so it holds
    `cdiv(table_tokens, block_size)` blocks. `decode_stage` is SequenceStage.DECODE
    (SQ:347-354): set once an update computes every token, cleared by a preemption.
    `run_key` orders `running`, `wait_key` the `waiting` deque (smaller is nearer the
    front); only their relative order matters. `swap_key` (swap configs only, one
    element) orders the `swapped` deque; a SWAPPED slot's `table_tokens` is its table on
    the CPU pool.
    """

    decode_stage: object = False
    table_tokens: object = 0
    run_key: object = 0
    wait_key: object = 0
    num_preemptions: object = 0
    swap_key: tuple[object, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuPool:
    """The swap side of the scheduler (swap configs only): the CPU allocator's free blocks,
    the key the next swapped-out victim gets (the `swapped` tail, S:1285, 1425), and the
    slot whose swap-out found no CPU room, plus one (0 while the engine runs): the
    RuntimeError of S:1829-1835 killed the engine."""

    free_blocks: object
    swap_tail: object = 0
    crashed: object = 0

@dataclass(frozen=True, slots=True)
class SchedState(QueueState[SlotState]):
    """The scheduler between two steps: slots, the GPU allocator's free blocks and the
    queue-key counters (`wait_head` is the key the next request pushed to the waiting
    front gets, `wait_tail` the next arrival's; `next_run_key` is the number of running
    requests, whose keys are renumbered 0.. after every step). `cpu` holds one CpuPool
    in a swap config, none otherwise."""

    cpu: tuple[CpuPool, ...] = ()

    @staticmethod
    def initial(num_slots: int, cfg: RuleConfig) -> SchedState:
        """No request has arrived; every block is free (the naive allocator has no null
        block), on the CPU pool too."""
        if not cfg.swaps:
            return SchedState(slots=tuple(SlotState() for _ in range(num_slots)),
                              free_blocks=cfg.num_gpu_blocks)
        return SchedState(slots=tuple(SlotState(swap_key=(0,)) for _ in range(num_slots)),
                          free_blocks=cfg.num_gpu_blocks, cpu=(CpuPool(cfg.num_cpu_blocks),))


# The Config fields a query may range over (the pool's watermark follows the pool).
RANGED_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_gpu_blocks")


def ranged_rule_config(ops: Ops, base: Config, values: Mapping[str, object]) -> RuleConfig:
    """The RuleConfig of `base` with the RANGED_FIELDS taken from `values` (ints or z3
    terms). The watermark is `int(watermark * num_gpu_blocks)` (BM:93), with a ranged pool
    the floor of the exact rational product: 0.01 as a double lies above 1/100, so for a
    whole number of blocks the double product never falls below the rational one's floor."""
    blocks = values["num_gpu_blocks"]
    watermark: object = base.watermark_blocks
    if not isinstance(blocks, int):
        w = Fraction(str(base.watermark))
        watermark = ops.floordiv(blocks * w.numerator, w.denominator)
    return RuleConfig(
        max_num_batched_tokens=values["max_num_batched_tokens"],
        max_num_seqs=values["max_num_seqs"], max_model_len=values["max_model_len"],
        num_gpu_blocks=blocks, watermark_blocks=watermark, block_size=base.block_size,
        enable_chunked_prefill=base.enable_chunked_prefill, swaps=base.swaps,
        num_cpu_blocks=base.num_cpu_blocks)


def family_constraints(base: Config, values: Mapping[str, object]) -> list[Bool]:
    """SchedulerConfig's two checks (SC:253-267, model/vllm_v0/config.py `rejection`) over
    ranged values: the family's configs that vLLM accepts."""
    batched, seqs, model_len = (values["max_num_batched_tokens"], values["max_num_seqs"],
                                values["max_model_len"])
    cons: list[Bool] = [batched >= seqs]  # type: ignore[list-item, operator]
    if not base.enable_chunked_prefill:
        cons.append(batched >= model_len)  # type: ignore[arg-type, operator]
    return cons
