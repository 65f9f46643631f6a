"""vLLM's speculative-decoding flags as `vllm serve` reads them: --speculative-config JSON
with --spec-method / --spec-model / --spec-tokens merged in (engine/arg_utils.py:2068-2081),
the method resolved as SpeculativeConfig resolves it (config/speculative.py). Shared by
`config` and by the commands that run the model (checker/config/serve_args.py)."""

from __future__ import annotations

import argparse
import json

from checker.config.flags import IGNORED_PREFIX
from model.core.errors import InputError
from model.vllm.startup import SPEC_METHODS, SpecDecode


def spec_decode(args: argparse.Namespace) -> SpecDecode | None:
    """--speculative-config with --spec-method/--spec-model/--spec-tokens merged in
    (engine/arg_utils.py:2068-2081), the method resolved as SpeculativeConfig resolves it
    from what batchproof can see (config/speculative.py:1131-1145, 1322-1383)."""
    doc: dict[str, object] = {}
    if getattr(args, "speculative_config", None):
        try:
            raw = json.loads(getattr(args, "speculative_config", None))
        except json.JSONDecodeError as exc:
            raise InputError(f"--speculative-config is not valid JSON ({exc.msg}); give "
                             'e.g. \'{"method": "eagle3", "num_speculative_tokens": 3}\'') from None
        if not isinstance(raw, dict):
            raise InputError("--speculative-config must be a JSON object")
        doc = {str(k).replace("-", "_"): v for k, v in raw.items()}
    # --spec-model is accepted with the ignored flags (model/vllm/serve_yaml.py); its name
    # is read here.
    spec_model = getattr(args, IGNORED_PREFIX + "spec_model", None)
    for flag, key, value in (("--spec-method", "method", getattr(args, "spec_method", None)),
                             ("--spec-model", "model",
                              None if spec_model is None else " ".join(spec_model)),
                             ("--spec-tokens", "num_speculative_tokens",
                              getattr(args, "spec_tokens", None))):
        if value is not None:
            if key in doc:
                raise InputError(f"{flag} and --speculative-config['{key}'] are mutually "
                                 "exclusive (engine/arg_utils.py:2068-2081)")
            doc[key] = value
    if not doc:
        return None
    k = doc.get("num_speculative_tokens")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InputError(f"num_speculative_tokens must be a positive integer, got {k!r}; "
                         "give it in --speculative-config or --spec-tokens "
                         "(config/speculative.py:393)")
    method = _spec_method(doc)
    flags = {}
    for key in ("parallel_drafting", "disable_eagle_block_drop",
                "disable_padded_drafter_batch"):
        value = doc.get(key, False)
        if not isinstance(value, bool):
            raise InputError(f"--speculative-config['{key}'] must be true or false, got "
                             f"{value!r}")
        flags[key] = value
    return SpecDecode(k, method, mtp_layers=getattr(args, "mtp_layers", None),
                      dynamic=doc.get("num_speculative_tokens_per_batch_size") is not None,
                      **flags)


# Substrings of the draft model's name that decide the method (config/speculative.py:
# 1330-1343), for every method but these (and the model-less ones).
_NAME_DECIDES = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"),
                 ("dspark", "dspark"))
# Methods that run without a 'model' (config/speculative.py:1148-1182).
_MODEL_LESS = ("mtp", "dspark", "ngram", "ngram_gpu", "suffix", "extract_hidden_states")
_NAME_KEEPS = ("eagle", "eagle3", "dflash", "dspark", "ngram", "ngram_gpu", "suffix",
               "custom_class", "extract_hidden_states")


def _spec_method(doc: dict[str, object]) -> str:
    """The speculative method upstream runs: 'method', or without it ngram for model
    'ngram' and draft_model otherwise (config/speculative.py:1131-1138); a draft model
    whose name says EAGLE, EAGLE3, DFlash or DSpark turns into that method (1322-1343)."""
    method, model = doc.get("method"), doc.get("model")
    if method is not None and not isinstance(method, str):
        raise InputError(f"--speculative-config['method'] must be a string, got {method!r}")
    if model is not None and not isinstance(model, str):
        raise InputError(f"--speculative-config['model'] must be a string, got {model!r}")
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method == "[ngram]":
        method = "ngram"
    if method.endswith("_mtp"):
        method = "mtp"  # every MTP model type is mtp (config/speculative.py:1141-1145)
    if method not in SPEC_METHODS:
        raise InputError(f"unknown speculative method {method!r}; known: "
                         f"{', '.join(SPEC_METHODS)}")
    if model is None and method not in _MODEL_LESS:
        raise InputError(f"speculative method {method} needs the draft model: give 'model' "
                         "in --speculative-config or --spec-model (vLLM: "
                         "\"num_speculative_tokens was provided but without speculative "
                         "model\", config/speculative.py:1148-1190)")
    if model is not None and method not in _NAME_KEEPS:
        for part, named in _NAME_DECIDES:
            if part in model.lower():
                return named
    return method
