"""vLLM 0.32.0's `assert num_new_tokens > 0` (scheduler.py:1170) as a crash of the engine.

It sits after the waiting request's chunk is cut to the budget (1169) and before any block
is allocated for it (1259-1282); the budget left is >= 1 there (912, 918-919), so only a
prefix hit of every token leaves 0, which kv_cache_manager.py:289-300 rules out by capping
the hit at num_tokens - 1. With that cap switched off (the rule switch `cap_prefix_hit`,
the bug class of vllm-project/vllm#30320) the reference and the rules both die there, as
they do at scheduler.py:1372; `admitted_with_tokens` is that assertion, judged at the crash
step, and `no_engine_assertion` sees the crash."""

import json
from dataclasses import replace

import pytest

from checker.cli.main import main
from checker.methods import bmc
from checker.methods.explore import Explorer
from checker.methods.replay import replay
from checker.methods.symbolic import Bounds, Family
from checker.methods.verdict import Counterexample
from model.core.ops import CONCRETE
from model.core.types import RequestSpec, Workload
from model.slots import run_rules, to_slots
from model.vllm.config import Config, VllmRules
from model.vllm.engine import ENGINE
from model.vllm.records import to_record
from model.vllm.reference import simulate, zero_tokens_assertion
from properties import catalogue
from properties.manifest import load

# tiny_cached_uncapped (properties/manifests/vllm_v1.toml)
UNCAPPED = Config(max_num_batched_tokens=4, max_num_seqs=4, max_model_len=8, block_size=2,
                  num_gpu_blocks=5, enable_prefix_caching=True,
                  rules=VllmRules(cap_prefix_hit=False))
CAPPED = replace(UNCAPPED, rules=VllmRules())


def shared(rid, prompt_len=2, arrival_step=1):
    return RequestSpec(rid, prompt_len, 1, arrival_step, prefix_group="g1",
                       shared_prefix_len=prompt_len)


# r0 is admitted first and caches its one full block at allocation (K:607-616); r1, the
# same two tokens, then hits both: num_new_tokens = 2 - 2 = 0.
WITNESS = Workload(UNCAPPED, (shared("r0"), shared("r1")), steps=3)
MESSAGE = ("scheduler.py:1170 AssertionError: request 'r1' was to be admitted with 0 "
           "tokens: a prefix hit covers all 2 of its tokens (assert num_new_tokens > 0)")


def test_without_the_cap_the_reference_dies_at_scheduler_1170():
    first, *later = simulate(WITNESS)
    # r1 listed as the admission asserted against, with 0 tokens; r0's admission before
    # it is lost with the engine; the pool as it stood: r0's block taken (4 usable - 1)
    assert first.extra == (("assertion", MESSAGE),)
    assert (first.scheduled, first.admitted, first.resumed, first.finished, first.running,
            first.free_blocks) == ((("r1", 0),), ("r1",), (), (), (), 3)
    for rec in later:  # dead from step 1: every later step records the assertion alone
        assert rec.extra == (("assertion", MESSAGE),)
        assert (rec.scheduled, rec.admitted, rec.finished, rec.free_blocks) == ((), (), (), 3)


def test_with_the_cap_the_same_workload_runs_and_no_assertion_is_reached():
    records = simulate(replace(WITNESS, config=CAPPED))
    # the hit is capped at 2 - 1 = 1 token, which is no whole block: r1 computes both
    assert records[0].scheduled == (("r0", 2), ("r1", 2))
    assert all("assertion" not in dict(r.extra) for r in records)


def test_a_hit_short_of_the_whole_prompt_is_admitted_without_the_cap_too():
    # r1 has one token beyond the shared block: 1 token left, no assertion
    w = Workload(UNCAPPED, (shared("r0"), RequestSpec("r1", 3, 1, 1, prefix_group="g1",
                                                      shared_prefix_len=2)), steps=1)
    (rec,) = simulate(w)
    assert rec.scheduled == (("r0", 2), ("r1", 1)) and "assertion" not in dict(rec.extra)


def test_the_words_name_the_request_and_whether_it_was_resuming():
    assert zero_tokens_assertion("it's", 3, resumed=True) == (
        "scheduler.py:1170 AssertionError: request \"it's\" was to be resumed with 0 tokens: "
        "a prefix hit covers all 3 of its tokens (assert num_new_tokens > 0)")


def test_the_rules_crash_at_the_step_and_pool_the_reference_does():
    sw = to_slots(WITNESS)
    by_rules = run_rules(sw)
    records = simulate(WITNESS)
    for got, ref in zip((to_record(s, sw.ids) for s in by_rules), records, strict=True):
        assert dict(got.extra) == {"assertion": True}
        if ref.step == 1:  # the rules only flag the dead engine: their pool moves on after
            assert replace(got, extra=()) == replace(ref, extra=())
    assert [s.assertion for s in by_rules] == [True, True, True]
    observed = ENGINE.observe(WITNESS, records)
    assert [s.assertion for s in observed] == [True, True, True]
    for steps in (by_rules, observed):
        r1 = steps[0].slots[1]
        assert (r1.admitted, r1.resumed, r1.scheduled) == (True, False, 0)
        assert not any(o.admitted or o.resumed for s in steps[1:] for o in s.slots)
    # the property is the assertion: failing at the crash step on both sides, not after
    expected = {"admitted_with_tokens": [False, True, True],
                "no_engine_assertion": [False, False, False],
                "kv_blocks_conserved": [True, True, True]}  # vacuous from the crash on
    for name, verdicts in expected.items():
        prop = catalogue.get(name)
        for steps in (by_rules, observed):
            assert [prop.holds(CONCRETE, steps, t) for t in range(3)] == verdicts, name


def manifest_case(config):
    nc = load().configs[config]
    return Family(base=nc.config), Bounds(**dict(nc.bounds))


@pytest.mark.parametrize("name", ["no_engine_assertion", "admitted_with_tokens"])
def test_bmc_and_the_explorer_find_the_crash_at_step_1_on_tiny_cached_uncapped(name):
    family, bounds = manifest_case("tiny_cached_uncapped")
    prop = catalogue.get(name)
    by_bmc = bmc.check(prop, family, bounds, 60)
    assert by_bmc.status == "violated" and by_bmc.depth == 1
    assert by_bmc.workload.requests == WITNESS.requests
    cex = Counterexample("vllm-v1", name, (), "tiny_cached_uncapped", by_bmc.workload, "bmc",
                         (), violated_at=1)
    assert replay(cex, prop).violated_at == 1  # on the reference too
    # the explorer at the witness's own sizes (the manifest's bounds take it ~10 s; `check
    # --method both` runs those): the least workload there is the least one above too
    small = replace(bounds, depth=1, max_prompt_len=2, max_max_tokens=1)
    by_explorer = Explorer([prop], family, small, 60).run()
    assert by_explorer.status == "violated"
    assert by_explorer.workload.requests == WITNESS.requests


def test_with_the_cap_bmc_finds_no_assertion_on_tiny_cached():
    family, bounds = manifest_case("tiny_cached")
    result = bmc.check(catalogue.get("no_engine_assertion"), family,
                       replace(bounds, depth=2), 60)
    assert result.status == "holds"


S1372 = {"config": {"max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 64,
                    "block_size": 4, "num_gpu_blocks": 40, "speculative_method": "ngram",
                    "num_speculative_tokens": 3, "long_prefill_token_threshold": 2},
         "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 8},
                      {"id": "b", "prompt_len": 1, "max_tokens": 4, "arrival_step": 2}],
         "steps": 4}


def workload_doc(w):
    return {"config": w.config.to_dict(),
            "requests": [{"id": r.id, "prompt_len": r.prompt_len, "max_tokens": r.max_tokens,
                          "arrival_step": r.arrival_step, "prefix_group": r.prefix_group,
                          "shared_prefix_len": r.shared_prefix_len} for r in w.requests],
            "steps": w.steps}


@pytest.mark.parametrize(("doc", "crash_step", "assertion"), [
    (workload_doc(WITNESS), 1, MESSAGE),
    # the S:1372 crash of tests/test_spec_decode.py, through the command
    (S1372, 2, "scheduler.py:1372 AssertionError: request 'b' was padded to 1 + 3 tokens"),
], ids=["scheduler.py:1170", "scheduler.py:1372"])
def test_simulate_stops_at_the_crash_step_and_prints_the_assertion(
        tmp_path, capsys, doc, crash_step, assertion):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {int(line.split()[0]): line.split() for line in out if line[:4].strip().isdigit()}
    assert sorted(rows) == list(range(1, doc["steps"] + 1))
    budget = doc["config"]["max_num_batched_tokens"]
    for step in range(crash_step, doc["steps"] + 1):  # the engine does nothing from the crash
        assert rows[step][1] == f"0/{budget}", rows[step]
        # (at scheduler.py:1170 the crash step lists the request asserted against, with 0)
        assert rows[step][2] == ("r1:0p" if (step, crash_step) == (1, 1) else "-"), rows[step]
    [said] = [line for line in out if line.startswith("engine assertion: ")]
    assert said.startswith(f"engine assertion: {assertion}")
    assert said.endswith("; the engine is dead from that step on")
    assert main(["simulate", str(path), "--json"]) == 0
    steps = json.JSONDecoder().raw_decode(capsys.readouterr().out)[0]["steps"]
    assert [("assertion" in s) for s in steps] == [s["step"] >= crash_step for s in steps]
    assert steps[crash_step - 1]["assertion"].startswith(assertion)


def test_a_dead_engine_is_no_livelock_for_bmc_as_for_the_explorer():
    # After the crash at step 1 every state repeats with r0 and r1 unfinished; the explorer
    # never counts a crashed step as stuck, and BMC's lasso requires the engine alive
    # (checker/methods/bmc.py `_lasso`; without that guard it answered VIOLATED at 2).
    family, bounds = manifest_case("tiny_cached_uncapped")
    small = replace(bounds, depth=2, max_prompt_len=2, max_max_tokens=1)
    prop = catalogue.get("never_finishes")
    assert bmc.check(prop, family, small, 120).status == "holds"
    assert Explorer([prop], family, small, 120).run().status == "holds"
