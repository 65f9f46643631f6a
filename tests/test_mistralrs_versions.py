"""mistral.rs's older versions: switches of the one rule set, selected as `mistralrs@VERSION`.
Each test states a fact of an upstream version (model/mistralrs/config.py SWITCHES cites the
lines) and checks the reference does it; the manifest's entries for older versions meet both
methods."""

import json
from dataclasses import asdict, replace

import pytest

from checker.cli.main import main
from model import registry
from model.core.errors import InputError
from model.core.types import RequestSpec, Workload
from model.mistralrs import engine as mistralrs
from model.mistralrs.config import PINNED, VERSIONS, MistralrsConfig, MistralrsRules, parse_config
from model.run import simulate
from model.workload import parse_workload, workload_to_json
from properties.manifest import load

TINY = {"max_num_batched_tokens": 4, "max_num_seqs": 3, "max_decode_steps_before_prefill": 2,
        "block_size": 2, "num_gpu_blocks": 6}


def run(version, requests, steps, **knobs):
    cfg = parse_config({**TINY, **knobs}, version)
    return simulate(Workload(config=cfg, requests=tuple(requests), steps=steps,
                             engine=f"mistralrs@{version}"))


def req(rid, prompt, max_tokens, arrival=1):
    return RequestSpec(id=rid, prompt_len=prompt, max_tokens=max_tokens, arrival_step=arrival)


# ---- the registry ------------------------------------------------------------------------

def test_a_version_is_the_same_engine_over_its_own_switches():
    old = registry.get("mistralrs@v0.8.22")
    assert (old.name, old.version, old.folder) == ("mistralrs@v0.8.22", "v0.8.22", "mistralrs")
    assert old.step is mistralrs.ENGINE.step and old.scheduler is mistralrs.ENGINE.scheduler
    assert old.parse_config({}).rules == VERSIONS["v0.8.22"]


def test_the_bare_name_and_the_pinned_version_are_the_pinned_engine():
    assert registry.get("mistralrs") is registry.get(f"mistralrs@{PINNED}") is mistralrs.ENGINE
    assert registry.get("mistralrs").parse_config({}).rules == MistralrsRules()


def test_an_unknown_version_names_the_known_ones():
    with pytest.raises(InputError, match="known versions: v0.8.22, v0.8.23, v0.9.0"):
        registry.get("mistralrs@v0.1.0")


def test_an_engine_with_one_version_refuses_a_version():
    # An unmodelled vLLM release is named with the ones modelled, not guessed.
    with pytest.raises(InputError, match="unknown vllm-v1 version '0.10.0'; known versions: "
                                         ".*0.32.0"):
        registry.get("vllm-v1@0.10.0")
    assert registry.versions("vllm-v1")[-1] == "0.32.0"
    assert registry.get("vllm-v1@0.32.0") is registry.get("vllm-v1")
    with pytest.raises(InputError, match="models one version"):
        registry.get("sglang@0.5.0")
    assert registry.versions("mistralrs")[0] == "v0.8.22"


def test_a_workload_may_name_a_version_and_round_trips():
    doc = {"engine": "mistralrs@v0.9.0", "config": {**TINY, "rules": {"bucket_by_length": False}},
           "requests": [{"id": "a", "prompt_len": 2, "max_tokens": 1}], "steps": 2}
    w = parse_workload(doc)
    assert w.config.rules == replace(VERSIONS["v0.9.0"], bucket_by_length=False)
    assert workload_to_json(w)["config"]["rules"] == {"bucket_by_length": False}
    assert parse_workload(json.loads(json.dumps(workload_to_json(w)))) == w


def test_a_config_of_its_own_version_writes_no_rules():
    assert "rules" not in parse_config(TINY, "v0.8.22").to_dict()
    assert "rules" not in MistralrsConfig().to_dict()


def test_a_bad_switch_is_one_line_naming_the_switches():
    with pytest.raises(InputError, match="unknown mistralrs rule switch 'nope'; switches: "):
        parse_config({"rules": {"nope": True}})
    with pytest.raises(InputError, match="must be true or false"):
        parse_config({"rules": {"escape_loop": 1}})


# ---- each change between adjacent versions is one commit's --------------------------------

@pytest.mark.parametrize(("older", "newer", "changed"), [
    ("v0.8.22", "v0.8.23", {"victim_newest"}),  # bf86b7184 (#2250)
    ("v0.8.23", "v0.9.0", {"reserve_next_token"}),  # c3667bb3f (#2295)
    ("v0.9.0", "v0.9.1", {"bucket_by_length", "alternate_turns"}),  # 8010b6a05 (#2354)
    ("v0.9.1", "v0.9.2", set()),  # metrics only
    ("v0.9.2", "b0882bd75", {"escape_loop"}),  # b0882bd75 (#2389)
    ("b0882bd75", "48be6c1e2", {"token_budget"}),  # 48be6c1e2 (#2390)
    ("48be6c1e2", PINNED, set()),  # 9e922623: a metrics gauge
])
def test_adjacent_versions_differ_in_the_switches_of_one_commit(older, newer, changed):
    a, b = asdict(VERSIONS[older]), asdict(VERSIONS[newer])
    assert {k for k in a if a[k] != b[k]} == changed


# ---- the rules of each version, on the reference --------------------------------------------

def test_before_bf86b7184_the_oldest_decoder_is_preempted():
    # Two prompts of 3 tokens hold 2 blocks each; each decoder asks for len() + 1 = 5
    # tokens (3 blocks): one block is left, so one must go (v0.8.22 S:412-414).
    two = [req("r0", 3, 2), req("r1", 3, 2)]
    assert run("v0.8.22", two, 2)[1].preempted == ("r0",)
    assert run("v0.8.23", two, 2)[1].preempted == ("r1",)


def test_before_c3667bb3f_a_decoder_reserves_a_block_for_its_next_token():
    one = [req("r0", 1, 2)]
    assert run("v0.8.23", one, 2)[1].free_blocks == 3  # 3 tokens: 2 blocks
    assert run("v0.9.0", one, 2)[1].free_blocks == 4  # 2 tokens: 1 block


def test_with_length_bucketing_the_longer_request_is_preempted_at_every_decode():
    # v0.9.0: the prompt bucket of r1 (2 tokens) is preempted at step 1 (S:365); prefill
    # first re-admits it at step 2 alone; from then on the two never have one length, so
    # the decode turns preempt r1 (S:436-438) and the prompt turns recompute it.
    records = run("v0.9.0", [req("r0", 1, 4), req("r1", 2, 4)], 6, num_gpu_blocks=20)
    assert [r.preempted for r in records] == [("r1",), (), ("r1",), (), ("r1",), ()]
    assert [dict(r.extra)["kind"] for r in records] == ["prompt", "prompt", "decode",
                                                        "prompt", "decode", "prompt"]
    after = run("v0.9.1", [req("r0", 1, 4), req("r1", 2, 4)], 6, num_gpu_blocks=20)
    assert all(not r.preempted for r in after)


def test_before_8010b6a05_prefill_comes_first_and_after_it_turns_alternate():
    late = [req("r0", 2, 3), req("r1", 2, 3, arrival=2)]
    assert [dict(r.extra)["kind"] for r in run("v0.9.0", late, 3)] == [
        "prompt", "prompt", "decode"]
    assert [dict(r.extra)["kind"] for r in run("v0.9.2", late, 3)] == [
        "prompt", "decode", "prompt"]


def test_before_b0882bd75_the_escape_takes_one_victim_and_then_rejects_the_head():
    # 3 usable blocks: r0 and r1 hold one each; r2 needs all three. After one failure
    # (waiting_timeout 1) the escape preempts r1 only and rejects r2 (v0.9.2 S:374-404);
    # b0882bd75 preempts r0 too and admits r2 (S:693-728).
    reqs = [req("r0", 1, 3), req("r1", 1, 3), req("r2", 5, 1)]
    old = run("v0.9.2", reqs, 3, num_gpu_blocks=4, waiting_timeout=1)[2]
    new = run("b0882bd75", reqs, 3, num_gpu_blocks=4, waiting_timeout=1)[2]
    assert (old.preempted, dict(old.finished).get("r2")) == (("r1",), "error")
    assert (new.preempted, new.admitted) == (("r1", "r0"), ("r2",))


def test_before_48be6c1e2_a_prompt_runs_whole_over_the_budget():
    assert run("b0882bd75", [req("r0", 5, 1)], 1)[0].scheduled == (("r0", 5),)
    assert run(PINNED, [req("r0", 5, 1)], 1)[0].scheduled == (("r0", 4),)


# ---- the manifest's bugs of past versions ---------------------------------------------------

def test_every_older_version_violates_a_property_a_newer_one_holds():
    entries = load().entries
    older = [v for v in VERSIONS if VERSIONS[v] != VERSIONS[PINNED]]
    for version in {str(VERSIONS[v]): v for v in older}.values():
        name = f"mistralrs@{version}"
        broken = {e.property for e in entries if e.engine == name and e.expected == "VIOLATED"}
        assert broken, f"{name} has no VIOLATED entry"
        later = list(VERSIONS)[list(VERSIONS).index(version) + 1:]
        held = {e.property for e in entries if e.expected == "HOLDS" and (
            e.engine == "mistralrs" or e.engine.partition("@")[2] in later)}
        assert broken & held, f"no later version holds what {name} violates"


@pytest.mark.parametrize("version", ["v0.8.22", "v0.8.23", "v0.9.0", "v0.9.2", "b0882bd75"])
def test_older_versions_meet_the_manifest_by_both_methods(version, capsys):
    args = ["check", "--engine", f"mistralrs@{version}", "--method", "both", "--json",
            "--jobs", "1"]
    # The escape entries are slow (below); of the rest, each version's own entry.
    if version == "v0.9.2":
        args += ["--property", "no_spurious_preemption"]
    if version == "b0882bd75":
        args += ["--property", "budget_respected"]
    code = main(args)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, [r for r in doc["verdicts"] if not r["as_expected"]]
    assert doc["summary"]["agreement"]["disagree"] == 0


@pytest.mark.slow
def test_the_escape_entries_meet_the_manifest_by_both_methods(capsys):
    for version in ("v0.9.2", "b0882bd75"):
        code = main(["check", "--engine", f"mistralrs@{version}", "--method", "both",
                     "--property", "feasible_not_rejected", "--json", "--jobs", "2"])
        doc = json.loads(capsys.readouterr().out)
        assert code == 0, doc["verdicts"]


def test_a_property_without_an_entry_for_a_version_is_answered(capsys, tmp_path):
    """budget_respected has no entry for v0.9.2: asked anyway, the answer is VIOLATED (the
    token budget came with 48be6c1e2, after v0.9.2) and the exit code says so."""
    code = main(["check", "--engine", "mistralrs@v0.9.2", "--property", "budget_respected",
                 "--json", "--jobs", "1", "--out", str(tmp_path)])
    (v,) = json.loads(capsys.readouterr().out)["verdicts"]
    assert v["expected"] is None and v["verdict"] == "VIOLATED" and code == 1
