"""The array explorer's twins (checker/methods/array/kinds.py): requests of a smaller
max_tokens searched as their twins of the largest, where z3 proves it."""

from dataclasses import replace

import hypothesis.strategies as st
import pytest
import symmetry_cases
from example_counts import examples
from hypothesis import given, settings

from checker.methods import array as ax
from checker.methods import proof_cache
from checker.methods.array import kinds
from checker.methods.array.layout import build, values_of
from checker.methods.explore import menu
from checker.methods.symbolic import Bounds, Family
from model import registry
from model.vllm.config import Config
from properties import catalogue

TINY = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=16, block_size=2,
              num_gpu_blocks=5)
BOUNDS = Bounds(slots=3, depth=5, max_prompt_len=3, max_max_tokens=3)
CASES = [*symmetry_cases.CASES, ("budget_respected", {}), ("kv_blocks_conserved", {}),
         ("computed_within_tokens", {}), ("starvation", {"k": 3})]


@pytest.mark.parametrize("name,params", CASES)
def test_the_twins_answer_as_the_whole_menu(name, params):
    prop = catalogue.get(name, **params)
    whole = ax.check(prop, Family(TINY), BOUNDS, 300,
                     options=ax.Options(merge_max_tokens=False))
    twins = ax.check(prop, Family(TINY), BOUNDS, 300)
    assert (twins.status, twins.depth, twins.workload) == \
        (whole.status, whole.depth, whole.workload)
    assert twins.stats.note and not whole.stats.note
    assert twins.stats.kinds * 3 == whole.stats.kinds == 9  # prompts 1..3 x max_tokens 1..3
    assert twins.stats.states < whole.stats.states


def test_the_cases_include_a_violation_and_a_proof():
    verdicts = {ax.check(catalogue.get(n, **p), Family(TINY), BOUNDS, 300).status
                for n, p in CASES}
    assert {"violated", "holds"} <= verdicts


def test_a_property_reading_max_tokens_searches_the_whole_menu():
    prop = catalogue.get("decode_stall_ceil_l_over_c")
    result = ax.check(prop, Family(TINY), BOUNDS, 300)
    assert (result.stats.kinds, result.stats.note) == (9, "")


def test_without_eos_the_whole_menu_is_searched():
    result = ax.check(catalogue.get("budget_respected"), Family(TINY),
                      replace(BOUNDS, no_eos=True), 300)
    assert (result.stats.kinds, result.stats.note) == (9, "")


def test_twins_of_a_menu():
    engine = registry.get("vllm-v1")
    whole = menu(BOUNDS, engine.rule_config(TINY))
    twins = kinds.max_tokens_twins(whole)
    assert twins is not None and [k.max_tokens for k in twins] == [3, 3, 3]
    assert kinds.max_tokens_twins(twins) is None  # nothing to leave out
    assert kinds.max_tokens_twins([k for k in whole if k.prompt_len != 2 or k.max_tokens < 3]
                                  ) is None  # a kind without its twin
    assert kinds.max_tokens_twins([k for k in whole if k.max_tokens != 2]
                                  ) is None  # a max_tokens a run may lower to is missing


def test_the_proof_holds_for_the_synchronous_scheduler_only():
    engine = registry.get("vllm-v1")
    with proof_cache.disabled():
        assert kinds.max_tokens_merged(engine, engine.rule_config(TINY), 3)
        assert not kinds.max_tokens_merged(
            engine, engine.rule_config(replace(TINY, async_scheduling=True)), 3)


def test_the_proof_fails_where_max_tokens_steers_anything_else():
    # A mutant whose step frees one block fewer while slot 0's max_tokens is 1: raising
    # it changes the next state, and the proof must see that.
    engine = registry.get("vllm-v1")

    def step(ops, cfg, specs, state, eos):
        nxt, obs = engine.step(ops, cfg, specs, state, eos)
        values = values_of(nxt)
        free = values[("free_blocks",)]
        shifted = build(nxt, lambda p: ops.ite(specs[0].max_tokens == 1, free - 1, free)
                        if p == ("free_blocks",) else values[p], nxt.step)
        return shifted, obs

    mutant = replace(engine, name="vllm-v1-max-tokens-mutant", step=step)
    with proof_cache.disabled():
        assert not kinds.max_tokens_merged(mutant, engine.rule_config(TINY), 3)


PROPERTIES = [("budget_respected", {}), ("kv_blocks_conserved", {}), ("starvation", {"k": 2}),
              ("starvation", {"k": 3}), ("head_of_line", {"k": 2}),
              ("preemption_storm", {"m": 0}), ("running_before_waiting", {})]


@st.composite
def questions(draw):
    """A small vLLM V1 config, bounds with EOS and a property the twins apply to."""
    cfg = Config(max_num_batched_tokens=draw(st.integers(2, 6)),
                 max_num_seqs=draw(st.integers(1, 3)), max_model_len=16,
                 block_size=draw(st.sampled_from([1, 2, 4])),
                 num_gpu_blocks=draw(st.integers(3, 6)),
                 enable_chunked_prefill=draw(st.booleans()))
    bounds = Bounds(slots=draw(st.integers(2, 3)), depth=draw(st.integers(3, 5)),
                    max_prompt_len=draw(st.integers(2, 4)),
                    max_max_tokens=draw(st.integers(2, 3)))
    name, params = draw(st.sampled_from(PROPERTIES))
    return cfg, bounds, catalogue.get(name, **params)


@settings(max_examples=examples(20), deadline=None)
@given(questions())
def test_on_any_small_config_the_twins_answer_as_the_whole_menu(question):
    cfg, bounds, prop = question
    whole = ax.check(prop, Family(cfg), bounds, 300, options=ax.Options(merge_max_tokens=False))
    twins = ax.check(prop, Family(cfg), bounds, 300)
    assert (twins.status, twins.depth, twins.workload) == \
        (whole.status, whole.depth, whole.workload)
    assert twins.stats.states <= whole.stats.states
