"""How the vLLM driver builds the real engine's objects cheaply without sharing state
between workloads (checker/conformance/vllm_real.py): the stub model's Hugging Face config
parsed once per process and deep-copied for every ModelConfig, and a VLLM_CACHE_ROOT per
vLLM release.

The tests of the memo need vLLM (`conformance`); the cache root's are pure.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from checker.conformance import vllm_real
from checker.conformance.modes import MODES
from checker.conformance.vllm_real import vllm_available, vllm_unavailable_reason

needs_vllm = pytest.mark.skipif(not vllm_available(), reason=f"{vllm_unavailable_reason()}")


def _model_config(model: str, max_model_len: int = 2048) -> object:
    v = vllm_real._vllm()
    return v.ModelConfig(model=model, skip_tokenizer_init=True, max_model_len=max_model_len)


@pytest.mark.conformance
@needs_vllm
def test_a_stub_config_is_parsed_once_and_every_model_config_gets_its_own_copy():
    """The memo answers the second ModelConfig of a stub without parsing, with a config
    equal to a fresh parse, and shares no object: a change one ModelConfig's owner makes
    to its config (as a caller of get_config may) shows in no later one, whether it was
    made to the answer of the parse (the first call) or of the memo."""
    import vllm.config.model as model_module
    import vllm.transformers_utils.config as hf

    stub = vllm_real._write_stub("batchproof-test-stub-")  # a stub no other test has read
    memo = model_module.get_config.batchproof_memo
    before = len(memo)
    first = _model_config(stub)
    assert len(memo) == before + 1
    first.hf_config.hidden_size = 999  # the parse's own answer, changed by its owner
    second = _model_config(stub, 4096)
    assert len(memo) == before + 1  # read back, not parsed again
    second.hf_config.num_hidden_layers = 7  # the memo's answer, changed by its owner
    third = _model_config(stub)
    fresh = hf.get_config(stub, False)
    assert third.hf_config.to_dict() == fresh.to_dict()
    assert third.hf_config.hidden_size == 64 and third.hf_config.num_hidden_layers == 1
    assert len({id(first.hf_config), id(second.hf_config), id(third.hf_config)}) == 3


@pytest.mark.conformance
@needs_vllm
def test_a_model_the_harness_did_not_write_is_parsed_every_time(tmp_path):
    """Only the stub directories this process wrote (never changed after) are memoized: a
    config.json elsewhere may change between two ModelConfigs, and each reads it anew."""
    import json

    (tmp_path / "config.json").write_text(json.dumps(vllm_real._STUB_MODEL_CONFIG))
    assert _model_config(str(tmp_path)).hf_config.hidden_size == 64
    (tmp_path / "config.json").write_text(
        json.dumps(dict(vllm_real._STUB_MODEL_CONFIG, hidden_size=128)))
    assert _model_config(str(tmp_path)).hf_config.hidden_size == 128


@pytest.mark.conformance
@needs_vllm
@pytest.mark.parametrize("mode", ["off", "spec", "spec-prefix", "connector",
                                  "hybrid-mamba-align-spec"])
def test_the_vllm_config_is_the_one_built_without_the_memo(mode, monkeypatch):
    """Every config of a mode's first workloads (draft models and EAGLE among them) gives
    the same VllmConfig with the memo as without it: the same printed config, the same
    hash, the same Hugging Face configs of the target and of the draft model."""
    import vllm.config.model as model_module
    import vllm.transformers_utils.config as hf

    vllm_real._vllm()
    memoized = model_module.get_config

    def facts(vc: object) -> tuple[object, ...]:
        spec = vc.speculative_config  # type: ignore[attr-defined]
        draft = None if spec is None or spec.draft_model_config is None else \
            spec.draft_model_config.hf_config.to_dict()
        return (str(vc), vc.compute_hash(),  # type: ignore[attr-defined]
                vc.model_config.hf_config.to_dict(), draft)  # type: ignore[attr-defined]

    for seed in range(8):
        cfg = replace(MODES[mode].generate(seed, 30).config, async_scheduling=False)
        monkeypatch.setattr(model_module, "get_config", memoized)
        with_memo = facts(vllm_real._vllm_config.__wrapped__(cfg))
        again = facts(vllm_real._vllm_config.__wrapped__(cfg))
        monkeypatch.setattr(model_module, "get_config", hf.get_config)
        without = facts(vllm_real._vllm_config.__wrapped__(cfg))
        assert with_memo == again == without, (mode, seed)


def test_the_plain_key_takes_data_and_module_functions_only():
    key = vllm_real._plain
    assert key({"b": [1, 2], "a": None}) == key({"a": None, "b": [1, 2]})
    assert key((1,)) != key([1]) and key(1) != key(1.0) != key("1") and key(True) != key(1)
    assert key(os.path.join) == key(os.path.join)
    with pytest.raises(TypeError):
        key(lambda: None)
    with pytest.raises(TypeError):
        key(object())
    with pytest.raises(TypeError):
        key("".join)  # a bound method


def _root(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], release: str) -> dict[str, str]:
    """The environment `_cache_root_per_release` leaves, starting from `env`, with
    `release` the vllm distribution found."""
    for name in ("VLLM_CACHE_ROOT", vllm_real._CACHE_ROOT_CHOSEN, "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(vllm_real.importlib.metadata, "version",
                        lambda name: {"vllm": release}[name])
    vllm_real._cache_root_per_release()
    return {name: os.environ[name] for name in ("VLLM_CACHE_ROOT", vllm_real._CACHE_ROOT_CHOSEN)
            if name in os.environ}


def test_each_release_gets_its_own_vllm_cache_root(monkeypatch, tmp_path):
    """vLLM's default root, one folder per release; a process started from another
    release's (its environment inherited) takes its own; a root the user set is kept."""
    xdg = str(tmp_path)
    mine = _root(monkeypatch, {"XDG_CACHE_HOME": xdg}, "0.32.0+cpu")
    assert mine["VLLM_CACHE_ROOT"] == os.path.join(xdg, "vllm", "batchproof-0.32.0+cpu")
    assert mine[vllm_real._CACHE_ROOT_CHOSEN] == mine["VLLM_CACHE_ROOT"]
    child = _root(monkeypatch, dict(mine, XDG_CACHE_HOME=xdg), "0.27.1+cpu")
    assert child["VLLM_CACHE_ROOT"] == os.path.join(xdg, "vllm", "batchproof-0.27.1+cpu")
    users = _root(monkeypatch, {"VLLM_CACHE_ROOT": "/somewhere"}, "0.27.1+cpu")
    assert users == {"VLLM_CACHE_ROOT": "/somewhere"}
    inherited_users = _root(monkeypatch, {"VLLM_CACHE_ROOT": "/somewhere",
                                          vllm_real._CACHE_ROOT_CHOSEN: "/elsewhere"},
                            "0.32.0+cpu")
    assert inherited_users["VLLM_CACHE_ROOT"] == "/somewhere"
