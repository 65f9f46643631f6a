"""vLLM 0.32.0's `assert num_new_tokens > 0` (scheduler.py:1170) is an event of
`no_engine_assertion`, as scheduler.py:1372 is (issue 31, item 6).

tests/test_assertion_1170.py shows the crash itself (the reference and the rules die at the
same step, BMC and the explorer find it, simulate's table); this file checks that the
property sees it at the depth `admitted_with_tokens` (which *is* that assertion) fails, by
both methods, that simulate names the assertion by its site, and that the verdict comes from
the 1170 flag: with the flag taken out of the rules (BMC) or the reference (the explorer),
`no_engine_assertion` HOLDS on the same config, so these tests can fail."""

import __future__

import inspect
import json
import textwrap
from dataclasses import replace

import pytest

from checker.cli.main import main
from checker.methods import bmc
from checker.methods.explore import Explorer
from checker.methods.symbolic import Bounds, Family
from model.vllm import reference, rules
from properties import catalogue
from properties.manifest import load

CONFIG = "tiny_cached_uncapped"  # properties/manifests/vllm_v1.toml


def manifest_case(bounds_change: dict) -> tuple[Family, Bounds]:
    nc = load().configs[CONFIG]
    return Family(base=nc.config), replace(Bounds(**dict(nc.bounds)), **bounds_change)


# Small enough for the explorer to take a second, and deep enough (2 steps, prompts up to 4)
# that a depth-1 answer is the least one and not the bound's.
SMALL = {"depth": 2, "max_prompt_len": 4, "max_max_tokens": 1}


def first_violation(method: str, name: str, bounds_change: dict) -> tuple[str, int, object]:
    family, bounds = manifest_case(bounds_change)
    prop = catalogue.get(name)
    if method == "bmc":
        result = bmc.check(prop, family, bounds, 120)
    else:
        result = Explorer([prop], family, bounds, 120).run()
    return result.status, result.depth, result.workload


@pytest.mark.parametrize(("method", "bounds_change"), [("bmc", {}), ("explore", SMALL)],
                         ids=["bmc-manifest-bounds", "explore-small-bounds"])
def test_no_engine_assertion_fails_where_admitted_with_tokens_does(method, bounds_change):
    assertion = first_violation(method, "no_engine_assertion", bounds_change)
    zero_tokens = first_violation(method, "admitted_with_tokens", bounds_change)
    assert assertion[0] == zero_tokens[0] == "violated"
    assert assertion[1] == zero_tokens[1] == 1
    # one minimal counterexample for both: two requests of one 2-token shared prompt
    assert assertion[2] is not None and zero_tokens[2] is not None
    assert assertion[2].requests == zero_tokens[2].requests
    assert [(r.prompt_len, r.shared_prefix_len) for r in assertion[2].requests] == [(2, 2)] * 2


def without_line(func, line: str):
    """`func` recompiled from its source with the statement `line` replaced by `pass`."""
    source = textwrap.dedent(inspect.getsource(func))
    assert source.count(line) == 1, f"{line!r} not found once in {func.__qualname__}"
    mutated = source.replace(line, "pass  # mutant")
    namespace = dict(func.__globals__)
    exec(compile(mutated, inspect.getsourcefile(func), "exec",  # noqa: S102
                 flags=__future__.annotations.compiler_flag, dont_inherit=True), namespace)
    return namespace[func.__name__]


def test_without_the_1170_flag_in_the_rules_bmc_finds_no_assertion(monkeypatch):
    # the statement that makes a 0-token admission an engine crash (rules.py `_waiting_loop`)
    assert first_violation("bmc", "no_engine_assertion", SMALL)[:2] == ("violated", 1)
    monkeypatch.setattr(rules, "_waiting_loop",
                        without_line(rules._waiting_loop, "w.crash = ops.or_(w.crash, zero)"))
    status, depth, _ = first_violation("bmc", "no_engine_assertion", SMALL)
    assert (status, depth) == ("holds", SMALL["depth"])


def test_without_the_1170_flag_in_the_reference_the_explorer_finds_no_assertion(monkeypatch):
    assert first_violation("explore", "no_engine_assertion", SMALL)[:2] == ("violated", 1)
    # the reference records an assertion only where its words are non-empty
    monkeypatch.setattr(reference, "zero_tokens_assertion", lambda *_a, **_k: "")
    status, depth, _ = first_violation("explore", "no_engine_assertion", SMALL)
    assert (status, depth) == ("holds", SMALL["depth"])


WITNESS_1170 = {
    "config": {"max_num_batched_tokens": 4, "max_num_seqs": 4, "max_model_len": 8,
               "block_size": 2, "num_gpu_blocks": 5, "enable_prefix_caching": True,
               "rules": {"cap_prefix_hit": False}},
    "requests": [{"id": rid, "prompt_len": 2, "max_tokens": 1, "prefix_group": "g1",
                  "shared_prefix_len": 2} for rid in ("r0", "r1")],
    "steps": 3}
# tests/test_spec_decode.py's S:1372 crash (a threshold of 2 below 1 + k = 4)
WITNESS_1372 = {
    "config": {"max_num_batched_tokens": 16, "max_num_seqs": 4, "max_model_len": 64,
               "block_size": 4, "num_gpu_blocks": 40, "speculative_method": "ngram",
               "num_speculative_tokens": 3, "long_prefill_token_threshold": 2},
    "requests": [{"id": "a", "prompt_len": 5, "max_tokens": 8},
                 {"id": "b", "prompt_len": 1, "max_tokens": 4, "arrival_step": 2}],
    "steps": 4}


def simulated(tmp_path, capsys, doc) -> tuple[int, list[str]]:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(doc))
    code = main(["simulate", str(path)])
    return code, capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(("doc", "site"), [
    (WITNESS_1170, "vllm/v1/core/sched/scheduler.py:1170 in Scheduler.schedule: "
                   "assert num_new_tokens > 0 (step 1;"),
    (WITNESS_1372, "vllm/v1/core/sched/scheduler.py:1372 in Scheduler.schedule: "
                   "assert num_new_tokens == 1 + self.num_spec_tokens (step 2;"),
], ids=["scheduler.py:1170", "scheduler.py:1372"])
def test_simulate_names_the_assertion_by_file_function_and_condition(
        tmp_path, capsys, doc, site):
    code, out = simulated(tmp_path, capsys, doc)
    assert code == 0  # the same for both assertions: the run is reported, not refused
    [said] = [line for line in out if line.startswith("assertion site: ")]
    assert said.startswith(f"assertion site: {site}")


def test_without_the_1170_flag_simulate_reports_no_assertion(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(reference, "zero_tokens_assertion", lambda *_a, **_k: "")
    code, out = simulated(tmp_path, capsys, WITNESS_1170)
    assert code == 0
    assert not any(line.startswith(("engine assertion", "assertion site")) for line in out)
