"""`batchproof diff vllm-v0 vllm-v1`: two engines joined by a config bridge
(model/vllm_v0/v1_bridge.py) compared on one environment by both methods; the fields the
bridge refuses, the observables it leaves out, and the pairs no bridge joins."""

import json
from dataclasses import replace

import pytest

from checker.cli.main import main
from checker.methods import diff, diff_explore
from checker.methods.explore import menu
from checker.methods.symbolic import Bounds
from model import registry
from model.core.errors import InputError
from model.core.types import RequestSpec, Workload
from model.run import simulate
from model.vllm_v0 import v1_bridge

# v0_tiny's scheduler with a pool where capacity never binds at these bounds: the
# scheduling order is all that can differ.
ROOMY = {"max_num_batched_tokens": 8, "max_num_seqs": 4, "max_model_len": 8, "block_size": 2,
         "num_gpu_blocks": 16}
SMALL = ["--slots", "2", "--depth", "2", "--max-prompt-len", "2", "--max-tokens", "2"]


def config_file(tmp_path, config, engine="vllm-v0"):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"engine": engine, "config": config, "requests": [],
                                "steps": 1}))
    return str(path)


def run_json(capsys, *args):
    code = main(["diff", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def requests(doc):
    return [(r["id"], r["prompt_len"], r["max_tokens"], r["arrival_step"])
            for r in doc["workload"]["requests"]]


def bridged(v0_raw):
    """V1's config dict for a V0 config dict, through the bridge."""
    v0 = registry.get("vllm-v0")
    return v1_bridge.v1_from_v0(v0.config_to_dict(v0.parse_config(v0_raw)))


def side(name, raw):
    engine = registry.get(name)
    return diff.Side(engine=engine.name, config=engine.parse_config(raw), label=name)


def test_v0_tiny_differs_at_step_1_by_the_null_block_with_both_methods(capsys):
    # V0 holds all 4 blocks, V1 3 (block 0 is its null block): two 3-token prompts
    # (2 blocks each) both fit V0's pool, only one fits V1's.
    code, doc = run_json(capsys, "vllm-v0", "vllm-v1", "--manifest-config", "v0_tiny",
                         "--method", "both")
    assert code == 1 and doc["method"] == "both"
    assert (doc["status"], doc["depth"], doc["minimal"]) == ("differ", 1, True)
    assert requests(doc) == [("r0", 3, 1, 1), ("r1", 3, 1, 1)]
    found = {(d["request"], d["observable"], d["a"], d["b"]) for d in doc["differences"]}
    assert found == {("r1", "scheduled", 3, 0), ("r1", "admitted", True, False),
                     ("r1", "finished", True, False)}
    assert doc["steps"]["a"][0]["scheduled"] == {"r0": 3, "r1": 3}
    assert doc["steps"]["b"][0]["scheduled"] == {"r0": 3}


def test_prefills_first_against_running_first_at_step_2(capsys, tmp_path):
    # V0's default path runs decodes only in a step without a prefill (0.10.2
    # core/scheduler.py:1256-1259); V1 serves RUNNING first, then admits (0.32.0
    # v1/core/sched/scheduler.py:657, 899-900).
    code, doc = run_json(capsys, "vllm-v0", "vllm-v1", "--config-file",
                         config_file(tmp_path, ROOMY), *SMALL, "--method", "both")
    assert code == 1 and (doc["status"], doc["depth"]) == ("differ", 2)
    assert requests(doc) == [("r0", 1, 2, 1), ("r1", 1, 1, 2)]
    found = {(d["request"], d["observable"], d["a"], d["b"]) for d in doc["differences"]}
    assert found == {("r0", "scheduled", 0, 1), ("r0", "finished", False, True)}
    assert doc["steps"]["a"][1]["scheduled"] == {"r1": 1}  # r1's prefill, no decode
    assert doc["steps"]["b"][1]["scheduled"] == {"r0": 1, "r1": 1}


@pytest.mark.parametrize("method", ["bmc", "explore"])
def test_the_reverse_order_finds_the_same_workload_mirrored(capsys, method):
    code, doc = run_json(capsys, "vllm-v1", "vllm-v0", "--manifest-config", "v0_tiny",
                         "--method", method)
    assert code == 1 and (doc["status"], doc["depth"], doc["method"]) == ("differ", 1, method)
    assert doc["config_engine"] == "vllm-v0"
    assert (doc["a"]["engine"], doc["b"]["engine"]) == ("vllm-v1", "vllm-v0")
    assert requests(doc) == [("r0", 3, 1, 1), ("r1", 3, 1, 1)]
    admitted = {(d["request"], d["a"], d["b"]) for d in doc["differences"]
                if d["observable"] == "admitted"}
    assert admitted == {("r1", False, True)}


def test_the_text_names_what_is_not_compared(capsys):
    assert main(["diff", "vllm-v0", "vllm-v1", "--manifest-config", "v0_tiny",
                 "--method", "explore"]) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("compared:")]
    assert len(lines) == 1 and "free_blocks is not compared" in lines[0]
    assert "DIFFER at step 1" in out and "A: vllm-v0" in out and "B: vllm-v1" in out


def test_free_blocks_are_not_compared_across_engines():
    a, b = side("vllm-v0", ROOMY), side("vllm-v1", bridged(ROOMY))
    assert diff.compared_step_observables(a, b) == ()
    assert diff.compared_step_observables(a, a) == diff.STEP_OBSERVABLES
    w = Workload(config=a.config, requests=(RequestSpec("r0", 2, 1, 1),), steps=1,
                 engine="vllm-v0")
    free = []
    for s in (a, b):
        ws = replace(w, engine=s.engine, config=s.config)
        free.append(registry.get(s.engine).observe(ws, simulate(ws))[0].free_blocks)
    assert free == [15, 14]  # V1's null block
    # The same decisions, free counts one apart: no difference.
    assert diff.concrete_differences(a, b, w) == ((),)


def test_v1_fields_v0_cannot_take_are_refused_not_dropped():
    base = registry.get("vllm-v1").config_to_dict(registry.get("vllm-v1").parse_config({}))
    assert v1_bridge.v0_from_v1(base)  # V1's defaults are the neutral values
    for name, value in [("enable_prefix_caching", True), ("async_scheduling", True),
                        ("long_prefill_token_threshold", 4), ("watermark", 0.1)]:
        with pytest.raises(InputError, match=f"field {name} is"):
            v1_bridge.v0_from_v1({**base, name: value})
    with pytest.raises(InputError, match="no vllm-v0 counterpart"):
        v1_bridge.v0_from_v1({**base, "new_field": 1})


def test_v0_fields_v1_cannot_take_are_refused_not_dropped():
    v0 = registry.get("vllm-v0")
    base = v0.config_to_dict(v0.parse_config(ROOMY))
    assert v1_bridge.v1_from_v0(base) == ROOMY | {"enable_chunked_prefill": False,
                                                   "policy": "fcfs"}
    for name, value in [("watermark", 0.05), ("max_num_partial_prefills", 2),
                        ("preemption_mode", "swap"), ("num_cpu_blocks", 4)]:
        with pytest.raises(InputError, match=f"vllm-v0 config field {name} is"):
            v1_bridge.v1_from_v0({**base, name: value})


def test_the_bridge_places_every_field_of_both_configs():
    # A field added to either config must be shared or one-sided, with its neutral value
    # (until then the translation refuses it); each neutral value is the engine's default.
    v0 = registry.get("vllm-v0").config_to_dict(registry.get("vllm-v0").parse_config({}))
    v1 = registry.get("vllm-v1").config_to_dict(registry.get("vllm-v1").parse_config({}))
    assert set(v0) <= set(v1_bridge.SHARED) | set(v1_bridge.V0_ONLY)
    assert set(v1) <= set(v1_bridge.SHARED) | set(v1_bridge.V1_ONLY)
    assert {k: v0[k] for k in v1_bridge.V0_ONLY if k in v0} == {
        k: o.neutral for k, o in v1_bridge.V0_ONLY.items() if k in v0}
    assert {k: v1[k] for k in v1_bridge.V1_ONLY if k in v1} == {
        k: o.neutral for k, o in v1_bridge.V1_ONLY.items() if k in v1}


@pytest.mark.parametrize(("args", "message"), [
    (["vllm-v1", "vllm-v0", "--manifest-config", "tiny_cached"],
     "vllm-v1 config field enable_prefix_caching is true, which vllm-v0 cannot take"),
    (["vllm-v0", "vllm-v1", "--manifest-config", "tiny_async"],
     "vllm-v1 config field async_scheduling is true, which vllm-v0 cannot take"),
    (["sglang", "vllm-v1"], "different engines and no config bridge joins them"),
    (["vllm-v1", "sglang", "--manifest-config", "tiny_fcfs"], "different engines"),
    (["vllm-v0", "vllm-v1", "--manifest-config", "mr_tiny"],
     "is a mistralrs config, not vllm-v0's or vllm-v1's"),
])
def test_bad_input_across_engines_is_one_line_and_exit_2(capsys, args, message):
    assert main(["diff", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_v0_field_v1_cannot_take_is_refused(capsys, tmp_path):
    path = config_file(tmp_path, {**ROOMY, "watermark": 0.05})
    assert main(["diff", "vllm-v0", "vllm-v1", "--config-file", path]) == 2
    err = capsys.readouterr().err
    assert "vllm-v0 config field watermark is 0.05, which vllm-v1 cannot take" in err
    assert err.count("\n") == 1


def test_the_environment_is_admissible_to_both():
    # V0 accepts prompt_len == max_model_len, V1 only below: the pair's prompts stop at
    # V1's longest, whichever side is A.
    short = {**ROOMY, "max_model_len": 4, "max_num_batched_tokens": 4}
    a, b = side("vllm-v0", short), side("vllm-v1", bridged(short))
    bounds = Bounds(slots=1, depth=3, max_prompt_len=4, max_max_tokens=2)
    cfg_a = registry.get("vllm-v0").rule_config(a.config)
    assert max(k.prompt_len for k in menu(bounds, cfg_a)) == 4
    assert max(k.prompt_len for k in diff_explore.pair_menu(bounds, a, b)) == 3
    assert max(k.prompt_len for k in diff_explore.pair_menu(bounds, b, a)) == 3
    for method in ("bmc", "explore"):
        r = diff_explore.decide(a, b, bounds, 60, method=method)
        assert r.status == diff.SAME, (method, r.reason)


def test_agreement_across_engines_is_never_proved(tmp_path, capsys):
    chunked = {"max_num_batched_tokens": 4, "max_num_seqs": 4, "max_model_len": 16,
               "block_size": 2, "num_gpu_blocks": 16, "enable_chunked_prefill": True}
    a, b = side("vllm-v0", chunked), side("vllm-v1", chunked)
    assert diff.prove_equivalent(a, b, 2, 30) is None
    code, doc = run_json(capsys, "vllm-v0", "vllm-v1", "--config-file",
                         config_file(tmp_path, chunked), "--slots", "2", "--depth", "3",
                         "--max-prompt-len", "3", "--max-tokens", "2")
    assert code == 0 and doc["status"] == "same" and doc["depth"] == 3
