"""The array explorer on configs with KV cache groups (Mamba state blocks, sliding windows)
against the reference explorer: the same verdict, depth and least counterexample for each
property. The array explorer steps the rules, which run the groups (model/vllm/rules.py);
its reductions are proved on those rules per config. State counts may differ: where a
reduction's proof fails for a group mix the array key is the finer one."""

from dataclasses import replace

import pytest

from checker.methods import array as ax
from checker.methods import explore
from checker.methods.jobs import family_of, symbolic_bounds
from model.vllm.config import GROUP_FULL, GROUP_MAMBA, GROUP_SLIDING, KvGroup
from properties import catalogue, manifest

PROPS = ("kv_blocks_conserved", "computed_within_tokens", "budget_respected")
MIXES = {
    "full+mamba": (KvGroup(GROUP_FULL), KvGroup(GROUP_MAMBA)),
    "sliding2": (KvGroup(GROUP_SLIDING, 2),),
    "full+sliding3": (KvGroup(GROUP_FULL), KvGroup(GROUP_SLIDING, 3)),
}


def _agree(config: str, mix: str, depth: int) -> None:
    nc0 = manifest.load().configs[config]
    cfg = replace(nc0.config, kv_cache_groups=MIXES[mix],
                  num_gpu_blocks=nc0.config.num_gpu_blocks + 2)
    nc = replace(nc0, config=cfg, bounds=tuple(
        (k, min(v, depth) if k == "depth" else v) for k, v in nc0.bounds))
    family, bounds = family_of(nc), symbolic_bounds(nc)
    assert ax.unsupported(family, bounds) is None
    props = [catalogue.get(p) for p in PROPS]
    reference = explore.check_many(props, family, bounds, 600)
    arrays = ax.check_many(props, family, bounds, 600)
    for p, ref, arr in zip(PROPS, reference, arrays, strict=True):
        assert (arr.status, arr.depth, arr.workload) == (ref.status, ref.depth, ref.workload), p


# All slow (7-30 s each): the default suite's sibling is tests/test_kv_groups.py, the rules
# the array explorer steps against the reference on group workloads, record by record.
@pytest.mark.slow
@pytest.mark.parametrize("config", ["tiny_fcfs", "tiny_async"])
@pytest.mark.parametrize("mix", list(MIXES))
def test_every_group_mix_is_searched_as_the_reference_searches_it(config, mix):
    _agree(config, mix, 4)
