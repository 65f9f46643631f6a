"""The z3 refinement of the exact prefix cache by the counted one
(checker/methods/theorems/counted_refinement.py): every rule proves at the sizes asked,
its hypotheses are satisfiable, and each clamp of model/vllm/abstract_cache.py tightened
wrongly makes its rule's refinement sat, with the facts its counterexample breaks."""

import json

import pytest
import z3

from checker.cli.main import main
from checker.methods import proof_cache
from checker.methods.theorems import counted_refinement as cr
from model.vllm import abstract_cache
from model.vllm.engine import with_cache_counted

# two requests of one prefix group can share a block; two positions, two blocks
SMALL = cr.Size(slots=2, table=2, pool=2, block_size=1)


def test_every_rule_refines_at_two_small_sizes():
    result = cr.prove(120, (SMALL, cr.Size(2, 2, 3, 2)))
    assert result.proved, result.detail
    assert result.detail.endswith(f"({len(cr.RULES)} rules), at 2 sizes (2 slots, tables of "
                                  "2 entries, pools of 2-3 blocks, block sizes 1-2)")


@pytest.mark.parametrize("rule", list(cr.RULES))
def test_each_claim_has_satisfiable_hypotheses(rule):
    # a claim valid for no state would prove nothing
    for claim in cr.RULES[rule](SMALL):
        solver = z3.Solver()
        solver.add(*claim.hypotheses)
        assert solver.check() == z3.sat, rule


def _no_held_hits(monkeypatch):
    lookup = abstract_cache.lookup
    monkeypatch.setattr(abstract_cache, "lookup", lambda ops, cfg, c, specs, sel, n, held:
                        lookup(ops, cfg, c, specs, sel, n, [0] * len(held)))


def _release_frees_all(monkeypatch):
    give_up = abstract_cache._give_up
    monkeypatch.setattr(abstract_cache, "_give_up",
                        lambda ops, c, raw, n: give_up(ops, c, 10**6, n))


def _evictable_beyond_hits(monkeypatch):
    # every hit block counted evictable (none of them held by another request)
    lookup = abstract_cache.lookup

    def all_evictable(ops, cfg, c, specs, sel, n, held):
        hit = lookup(ops, cfg, c, specs, sel, n, held)
        return abstract_cache.CountHit(hit.blocks, hit.blocks)
    monkeypatch.setattr(abstract_cache, "lookup", all_evictable)


MUTATIONS = {
    "no group hits": (lambda m: m.setattr(abstract_cache, "_from_group", lambda ops, *a: 0),
                      "lookup and adoption", "the counted hit is the exact one"),
    "no held hits": (_no_held_hits, "lookup and adoption", "the counted hit is the exact one"),
    "every hit evictable": (_evictable_beyond_hits, "lookup and adoption",
                            "the counted evictable blocks are the exact ones"),
    "release frees all": (_release_frees_all, "release of a preempted request",
                          "the counted blocks freed are the exact ones"),
    "finished release frees all": (_release_frees_all, "release of the finished requests",
                                   "the counted blocks freed are the exact ones"),
    "nothing cached": (lambda m: m.setattr(abstract_cache, "cache", lambda *a: None),
                       "caching of full blocks", "its hash was cached by a request"),
}


@pytest.mark.parametrize("mutation", list(MUTATIONS))
def test_a_clamp_tightened_wrongly_makes_its_rule_sat(mutation, monkeypatch):
    patch, rule, broken = MUTATIONS[mutation]
    assert cr.check(rule, SMALL, 60) == (z3.unsat, "")  # the unmodified abstraction
    patch(monkeypatch)
    result, why = cr.check(rule, SMALL, 60)
    assert result == z3.sat and broken in why, (result, why)
    # and the whole proof says which rule, at which size, and what broke
    proved = cr.prove(60, (SMALL,), [rule])
    assert not proved.proved and proved.detail.startswith(f"{rule} ({SMALL}): sat, breaking")


def test_a_release_that_frees_shared_blocks_is_caught_in_async_delivery(monkeypatch):
    _release_frees_all(monkeypatch)
    rule = "delivered outputs (async): caching, then release of the finished requests"
    result, why = cr.check(rule, SMALL, 60)
    assert result == z3.sat and "the counted blocks freed are the exact ones" in why


def test_the_evidence_names_the_refinement_once_proved_else_replay_only(monkeypatch):
    with proof_cache.disabled():
        monkeypatch.setattr(cr, "_PROVED", {})
        monkeypatch.setattr(cr, "JOB_SIZES", (SMALL,))
        monkeypatch.setattr(cr, "stored_prove", lambda t, sizes=(SMALL,): cr.prove(t, sizes))
        said = cr.evidence(with_cache_counted, 60)
        assert said.startswith("the counted cache refines the exact one: z3, per rule")
        monkeypatch.setattr(abstract_cache, "cache", lambda *a: None)
        said = cr.evidence(with_cache_counted, 60)
        assert said.startswith("the carry-over to the exact rules rests on replayed runs only")
        assert "caching of full blocks" in said


@pytest.mark.slow  # deep: the 8-block pool's proofs (10-14 s); the test above is its fast sibling
def test_a_counted_proof_names_its_evidence(capsys):
    # an 8-block pool with drafts: PROVED by 1-induction over the counted cache. The
    # refinement is proved first (or read back from the store), so that the job's own time
    # limit under load does not decide what its detail says
    assert cr.stored_prove(600).proved
    code = main(["check", "--manifest-config", "tiny_spec_cached", "--property",
                 "sampled_within_max_model_len", "--json"])
    out, _ = capsys.readouterr()
    [row] = json.loads(out)["verdicts"]
    assert code == 0 and (row["verdict"], row["method"]) == ("PROVED", "induction"), row
    assert ("the counted cache refines the exact one: z3, per rule "
            f"({len(cr.RULES)} rules), at {cr.describe(cr.JOB_SIZES)}") in row["detail"], row


def test_the_sizes_are_described_by_their_ranges():
    assert cr.describe(cr.JOB_SIZES) == ("9 sizes (1-2 slots, tables of 1-4 entries, pools of "
                                         "1-3 blocks, block sizes 1/2/4)")


#: The whole list `cr.SIZES` in shards, one per slot count, table length and pool size
#: (each its three block sizes), so that `pytest -n auto -m slow` spreads them over the
#: cores: as one test it took 433 s on one worker (CI step 5's longest); the shard at
#: 2 slots, table 4, pool 4 is the longest (70 s of CPU, docs/deployed_mode.md).
WHOLE_LIST_SHARDS = {(slots, table, pool): tuple(cr.Size(slots, table, pool, bs)
                                                 for bs in (1, 2, 4))
                     for slots in (1, 2) for table in (1, 2, 3, 4) for pool in (1, 2, 3, 4)}


def test_the_shards_of_the_whole_list_are_its_sizes():
    # every size of the whole list in exactly one shard, and no size besides
    sizes = [size for shard in WHOLE_LIST_SHARDS.values() for size in shard]
    assert len(sizes) == len(set(sizes)) == len(cr.SIZES) == 96
    assert set(sizes) == set(cr.SIZES)


@pytest.mark.slow
@pytest.mark.parametrize("shard", list(WHOLE_LIST_SHARDS),
                         ids=[f"slots{s}-table{t}-pool{p}" for s, t, p in WHOLE_LIST_SHARDS])
def test_every_rule_refines_at_every_size_of_the_whole_list(shard):
    # 1-2 slots, every table length the exact cache carries, pools 1-4 (not 5-8: the
    # module says why); this shard's sizes, every rule at each
    sizes = WHOLE_LIST_SHARDS[shard]
    result = cr.prove(3000, sizes)
    assert result.proved, result.detail
    assert result.detail.endswith(f"({len(cr.RULES)} rules), at {cr.describe(sizes)}")
