"""The vLLM V0 workloads whose steps are computed by hand (tests/test_vllm_v0_reference.py
and tests/test_vllm_v0_swap.py), in one place for the tests that run them again: the rules
against the reference (tests/test_vllm_v0_refinement.py) and the reference against the
real 0.10.2 Scheduler (tests/test_vllm_v0_conformance.py)."""

from __future__ import annotations

from model.core.types import EosEvent, RequestSpec, Workload
from model.vllm_v0.config import ENGINE_VLLM_V0, Config


def workload(cfg: Config, *requests: tuple[str, int, int, int], steps: int,
             eos: tuple[tuple[str, int], ...] = ()) -> Workload:
    """A V0 workload: requests (id, prompt_len, max_tokens, arrival_step), EOS (id, step)."""
    return Workload(config=cfg, steps=steps, engine=ENGINE_VLLM_V0,
                    requests=tuple(RequestSpec(id=i, prompt_len=p, max_tokens=m, arrival_step=a)
                                   for i, p, m, a in requests),
                    eos=tuple(EosEvent(id=i, step=s) for i, s in eos))


_SMALL = dict(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=4,
              num_gpu_blocks=16)

# The workloads of tests/test_vllm_v0_reference.py, whose steps are computed by hand there.
HAND_COMPUTED = {
    "prefills first, then decodes": workload(
        Config(**_SMALL), ("a", 3, 3, 1), ("b", 2, 2, 2), steps=4),
    "the watermark refuses an admission": workload(
        Config(max_num_batched_tokens=100, max_num_seqs=4, max_model_len=100, block_size=1,
               num_gpu_blocks=100), ("a", 60, 5, 1), ("b", 40, 5, 1), steps=2),
    "recompute preemption of the running tail": workload(
        Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
               num_gpu_blocks=3), ("a", 2, 6, 1), ("b", 1, 6, 1), ("c", 1, 6, 1), steps=3),
    "a decode with room in its block still needs a free block": workload(
        Config(max_num_batched_tokens=8, max_num_seqs=4, max_model_len=8, block_size=2,
               num_gpu_blocks=2), ("a", 3, 4, 1), steps=3),
    "a prompt longer than max_model_len is ignored": workload(
        Config(**_SMALL), ("a", 9, 2, 1), ("b", 3, 1, 1), steps=2),
    "a prompt the pool can never hold is ignored": workload(
        Config(max_num_batched_tokens=128, max_num_seqs=4, max_model_len=128, block_size=1,
               num_gpu_blocks=100), ("a", 100, 2, 1), ("b", 99, 1, 1), steps=1),
    "EOS stops": workload(Config(**_SMALL), ("a", 3, 5, 1), steps=3, eos=(("a", 2),)),
    "max_model_len finishes": workload(
        Config(**{**_SMALL, "max_model_len": 5}), ("a", 4, 10, 1), steps=2),
    "chunked mode admits after a preemption": workload(
        Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
               num_gpu_blocks=3, enable_chunked_prefill=True),
        ("a", 2, 8, 1), ("b", 2, 8, 1), ("c", 1, 1, 2), steps=2),
    "chunked mode allocates the whole prompt and chunks it": workload(
        Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=4,
               num_gpu_blocks=10, enable_chunked_prefill=True), ("a", 10, 1, 1), steps=3),
}


_SWAP = dict(preemption_mode="swap")

# The swap workloads of tests/test_vllm_v0_swap.py, computed by hand there (and run on the
# real 0.10.2 Scheduler).
# Default path, block_size 2, 4 GPU blocks, 8 CPU blocks; r0 and r1: 3-token prompts.
SWAP_DEFAULT = workload(
    Config(max_num_batched_tokens=16, max_num_seqs=4, max_model_len=16, block_size=2,
           num_gpu_blocks=4, num_cpu_blocks=8, **_SWAP),
    ("r0", 3, 6, 1), ("r1", 3, 6, 1), steps=8)
# The CPU pool too small: r0 (1 token) and r1 (3 tokens), 3 GPU blocks, 1 CPU block.
SWAP_CRASH = workload(
    Config(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=8, block_size=2,
           num_gpu_blocks=3, num_cpu_blocks=1, **_SWAP),
    ("r0", 1, 2, 1), ("r1", 3, 2, 1), steps=3)
# Chunked path: budget 4, block_size 2, 4 GPU blocks, 4 CPU blocks.
SWAP_CHUNKED = workload(
    Config(max_num_batched_tokens=4, max_num_seqs=2, max_model_len=16, block_size=2,
           num_gpu_blocks=4, enable_chunked_prefill=True, num_cpu_blocks=4, **_SWAP),
    ("r0", 2, 3, 1), ("r1", 6, 2, 1), steps=5)
# As SWAP_CHUNKED with r1's prompt 8, 5 GPU blocks and 8 CPU blocks.
SWAP_CHUNKED_LONG = workload(
    Config(max_num_batched_tokens=4, max_num_seqs=2, max_model_len=16, block_size=2,
           num_gpu_blocks=5, enable_chunked_prefill=True, num_cpu_blocks=8, **_SWAP),
    ("r0", 2, 3, 1), ("r1", 8, 2, 1), steps=8)

# Those, and two more: a swap-in the whole GPU can never hold (NEVER) and the watermark on
# swap-in.
SWAP_HAND_COMPUTED = {
    "default path swaps the tail out and back in": SWAP_DEFAULT,
    "a CPU pool too small kills the engine": SWAP_CRASH,
    "chunked path swaps a prefill out and back in whole": SWAP_CHUNKED,
    "chunked path never swaps back a prefill longer than the budget": SWAP_CHUNKED_LONG,
    # r0 fills both blocks; its decode swaps itself out (1 touched + 2 full = 3 CPU
    # blocks); coming back it needs 3 > the 2 GPU blocks: NEVER, ignored, its CPU blocks
    # never returned; r1 is admitted once `swapped` is empty.
    "a swap-in the whole GPU can never hold is ignored": workload(
        Config(max_num_batched_tokens=8, max_num_seqs=2, max_model_len=8, block_size=2,
               num_gpu_blocks=2, num_cpu_blocks=8, **_SWAP),
        ("r0", 4, 4, 1), ("r1", 2, 2, 2), steps=5),
    # 100 blocks keep a watermark of 1 (BM:93): a swap-in needs one block more; in this
    # run one finds exactly as many free blocks as it touches and waits (LATER).
    "the watermark holds a swap-in back": workload(
        Config(max_num_batched_tokens=128, max_num_seqs=4, max_model_len=128, block_size=1,
               num_gpu_blocks=100, num_cpu_blocks=100, **_SWAP),
        ("r2", 23, 17, 2), ("r1", 27, 20, 3), ("r3", 25, 29, 3), ("r0", 15, 13, 6),
        steps=40),
}
