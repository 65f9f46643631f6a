"""What `batchproof config` prints: the effective configuration with origins, the rule a
configuration breaks, each hazard's verdict and witness timeline, the rule reasons; as text
or as one JSON document."""

from __future__ import annotations

import json
import sys

from checker.config.hazards import HazardResult
from checker.config.model_kind import NOT_STATED, ModelKind, checkpoint_warning
from checker.config.resolve import Checked, Request, kv_sizing
from checker.config.rule_reasons import RuleReason
from checker.show import text as render
from model.core.errors import ConfigError
from model.vllm.config import Config
from model.vllm.deployment import MODELLED, Deployment, outside_reason
from model.vllm.startup import SpecDecode

SCOPE = ("model scope: vLLM V1's Scheduler as one data-parallel rank runs it; it covers "
         + (", ".join(sorted(MODELLED)) if MODELLED else "no feature beyond SchedulerConfig")
         + " (model/vllm/deployment.py)")


def scope_lines(dep: Deployment, kind: ModelKind = NOT_STATED) -> list[str]:
    """The model's scope, the served model's KV cache layout, and the features this
    deployment turns on beyond it."""
    outside = dep.outside_model()
    lines = [SCOPE + "; kv cache: " + kind.describe()]
    if outside:
        lines.append("this deployment turns on what the model leaves out: "
                     + "; ".join(f"{f.name} ({f.effect}; {f.upstream})" for f in outside))
        lines.append("so a verdict that depends on them is UNKNOWN (" + outside_reason(outside)
                     + "); turn a feature off (e.g. --no-enable-prefix-caching, "
                     "--no-async-scheduling) to check the rest")
    return lines


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unset" if value is None else str(value)


def warnings(cfg: Config, req: Request) -> tuple[str, ...]:
    """vLLM's logged warnings for this configuration."""
    out = []
    if cfg.max_num_batched_tokens > cfg.max_num_seqs * cfg.max_model_len:
        out.append(f"max_num_batched_tokens ({cfg.max_num_batched_tokens}) exceeds "
                   f"max_num_seqs * max_model_len ({cfg.max_num_seqs * cfg.max_model_len}); "
                   "vLLM warns this may lead to unexpected behaviour "
                   "(config/scheduler.py:344-350)")
    if checked_pool(cfg, req):
        out += kind_warnings(req, cfg)
    if req.spec is not None and cfg.token_budget < 8192:
        out.append(f"max_num_scheduled_tokens is {cfg.token_budget} with speculative "
                   "decoding; vLLM warns below 8192, though nothing is subtracted for the "
                   "draft slots (config/vllm.py:2275-2283)")
    return tuple(out)


def checked_pool(cfg: Config, req: Request) -> bool:
    """Whether the pool was given (the startup check applies)."""
    return req.engine_args.num_gpu_blocks is not None


def kind_warnings(req: Request, cfg: Config) -> list[str]:
    """What the KV startup check of a hybrid model cannot settle from batchproof's input."""
    kind, out = req.kind, []
    if not kind.stated or kind.one_full_group:
        return out
    ckpt = checkpoint_warning(kind, kv_sizing(req, cfg))
    if ckpt:
        out.append(ckpt)
    if any(f.name == "KV connector" for f in req.deployment.features()):
        out.append("a KV connector without hybrid-manager support turns the hybrid KV cache "
                   "manager off (config/vllm.py:2170-2192): sliding-window layers are then "
                   "allocated as full attention (one group of cdiv(max_model_len, block_size) "
                   "blocks) and a hybrid-mamba model fails to start; the check above assumes "
                   "the manager on")
    return out


def _header(req: Request, checked: Checked) -> list[str]:
    eff = checked.effective
    assert eff is not None
    dev = eff.device
    where = (f"device {dev.key} ({dev.memory_gib:g} GiB)" if dev.key != "custom"
             else f"a device of {dev.memory_gib:g} GiB")
    if req.device is None:
        where = "device not given (both batch sizes set by the user)"
    lines = [f"batchproof config: vLLM 0.32.0{' ' + req.model if req.model else ''}, "
             f"usage {eff.usage}, {where}, performance mode {eff.performance_mode}", "",
             "effective configuration (as vLLM's EngineArgs resolves it):"]
    rows = [(name, _show(r.value), r.origin, r.why) for name, r in eff.values]
    rows += _deployment_rows(req.deployment)
    if not checked.pool_known:
        rows = [(n, v if n != "num_gpu_blocks" else "unknown", o, w) for n, v, o, w in rows]
    w0, w1, w2 = (max(len(r[i]) for r in rows) for i in range(3))
    lines += [f"  {n.ljust(w0)}  {v.rjust(w1)}  {o.ljust(w2)}  {w}" for n, v, o, w in rows]
    if req.spec is not None:
        lines += spec_lines(req.spec, checked)
    if req.ignored:
        lines.append("ignored vLLM flags (not read by the scheduler model): "
                     + ", ".join("--" + n.replace("_", "-") for n in req.ignored))
    return lines


def spec_sizes(spec: SpecDecode, checked: Checked) -> dict[str, object]:
    """What upstream derives from the speculative settings, for the text and --json:
    draft slots (config/speculative.py:1887-1926), lookahead (config/vllm.py:615-641; None
    when the draft model's config decides it), EAGLE's block drop (1944-1952)."""
    assert checked.config is not None
    sized = spec.sized(checked.config)
    lookahead: int | None = sized.num_lookahead_tokens if spec.method != "dspark" else None
    return {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens,
            "parallel_drafting": sized.parallel_drafting, "draft_slots": sized.draft_slots,
            "num_lookahead_tokens": lookahead,
            "lookahead": spec.lookahead_text(checked.config),
            "eagle_block_drop": spec.block_drop(checked.config),
            "modelled": spec.outside() is None, "outside": spec.outside()}


def spec_lines(spec: SpecDecode, checked: Checked) -> list[str]:
    """The speculative-decoding line of the effective configuration."""
    d = spec_sizes(spec, checked)
    parallel = ", parallel drafting" if d["parallel_drafting"] else ""
    drop = "on" if d["eagle_block_drop"] else "off"
    lines = [f"  speculative decoding: {spec.method}{parallel}, num_speculative_tokens="
             f"{spec.num_speculative_tokens}: {d['draft_slots']} draft slot(s) per request "
             "(config/speculative.py:1887-1926), lookahead "
             f"{d['lookahead']} KV slot(s) (config/vllm.py:615-641), EAGLE block drop {drop} "
             "(config/speculative.py:1944-1952)"]
    if spec.outside() is not None:
        lines.append(f"    outside the model: {spec.outside()}")
    return lines


def _deployment_rows(d: Deployment) -> list[tuple[str, str, str, str]]:
    """The two scheduling features `vllm serve` resolves beside EngineArgs' numbers."""
    return [
        ("enable_prefix_caching", _show(d.prefix_caching), "serve",
         "on unless --no-enable-prefix-caching (config/cache.py:141, "
         "engine/arg_utils.py:2987-3055)"),
        ("async_scheduling", _show(d.async_scheduling), "serve",
         "on unless --no-async-scheduling, pipeline parallelism, the CPU platform or a "
         "speculative method without async support (config/vllm.py:1541-1644)")]


def print_invalid(req: Request, checked: Checked, notes: tuple[str, ...],
                  as_json: bool) -> None:
    """The effective configuration and the rule it breaks (error line on stderr)."""
    assert checked.error is not None
    if as_json:
        print(json.dumps(_json_doc(req, checked, notes, ()), indent=1))
    else:
        print("\n".join(_header(req, checked) + ["", "validation: INVALID (vLLM refuses to "
                                                    f"start: rule {checked.error.rule})"]))
    write_error(checked.error)


def print_report(req: Request, checked: Checked, notes: tuple[str, ...],
                 results: tuple[HazardResult, ...], as_json: bool) -> None:
    """The full report: effective configuration, validation, hazards."""
    if as_json:
        print(json.dumps(_json_doc(req, checked, notes, results), indent=1))
        return
    assert checked.config is not None
    lines = _header(req, checked)
    lines += ["note: " + n for n in notes]
    lines += ["warning: " + w for w in warnings(checked.config, req)]
    kv = ("the KV pool holds one max_model_len request" if checked.pool_known
          else "KV startup check not applied: pool size not given (--num-gpu-blocks)")
    spec = "; speculative-decoding budget rules hold" if req.spec is not None else ""
    lines += ["", f"validation: valid: every SchedulerConfig rule holds; {kv}{spec}", "",
              *scope_lines(req.deployment, req.kind), "", "hazards:"]
    for r in results:
        lines += _hazard_lines(r)
    counts = {v: sum(r.verdict == v for r in results) for v in
              ("WITNESSED", "PROVED absent", "HOLDS within bounds", "UNKNOWN")}
    lines.append("summary: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    print("\n".join(lines))


def _hazard_lines(r: HazardResult) -> list[str]:
    # The KV layout premise (hazards.decide_all) gets a line of its own.
    detail, sep, premise = r.detail.rpartition("; premise: ")
    lines = [f"  [{r.verdict}] {r.name}: {r.title}", f"      {detail if sep else r.detail}"]
    if sep:
        lines.append(f"      premise: {premise}")
    if r.witness is None:
        return lines
    w = r.witness
    table = render.requests_table(w.workload)
    timeline = render.timeline(w.workload, w.shown(), highlight=w.violated_at, loop=w.loop)
    body = ["requests:", *_compact(table.rstrip("\n").split("\n"))]
    if w.workload.kv_hits:  # a KV connector's environment: its hits, and no load reported
        hits = [f"{h.id}={h.tokens}{' async' if h.load_async else ''}"
                for h in w.workload.kv_hits]
        shown = hits if len(hits) <= 4 else [*hits[:3], f"... ({len(hits) - 3} more)"]
        body.append("external KV hits (tokens): " + ", ".join(shown) + "; load reports: "
                    + (", ".join(f"{e.id}@{e.step}" for e in w.workload.kv_loads) or "none"))
    if w.first_shown > 1:
        body.append(f"(steps 1-{w.first_shown - 1} not shown)")
    body += _compact(timeline.rstrip("\n").split("\n"), rows_from=2 if "v" in timeline else 1)
    body += [f"step {rec.step}: the engine crashes: {dict(rec.extra)['assertion']}"
             for rec in w.shown() if "assertion" in dict(rec.extra)][:1]
    return lines + ["      " + line if line else "" for line in body] + [""]


def _compact(lines: list[str], rows_from: int = 0) -> list[str]:
    """Collapse runs of three or more request rows that read the same apart from the
    request id (constructed witnesses hold hundreds of alike requests)."""
    def body(line: str) -> str | None:
        text = line.strip()
        if not text.startswith("r") or not text[1:2].isdigit():
            return None
        return text.split(maxsplit=1)[1] if " " in text else ""

    out: list[str] = []
    i = 0
    while i < len(lines):
        key = body(lines[i]) if i >= rows_from else None
        j = i + 1
        while key is not None and j < len(lines) and body(lines[j]) == key:
            j += 1
        if j - i >= 3:
            first = lines[i].strip().split()[0].rstrip(":")
            last = lines[j - 1].strip().split()[0].rstrip(":")
            out += [lines[i], f"  ... {first} to {last}: {j - i} alike"]
        else:
            out += lines[i:j]
        i = j
    return out


def _json_doc(req: Request, checked: Checked, notes: tuple[str, ...],
              results: tuple[HazardResult, ...]) -> dict[str, object]:
    eff = checked.effective
    assert eff is not None
    err = checked.error
    return {
        "vllm_version": "0.32.0", "model": req.model, "usage": eff.usage,
        "device": None if req.device is None else {"name": eff.device.key,
                                                   "memory_gib": eff.device.memory_gib},
        "performance_mode": eff.performance_mode,
        "effective": {name: {"value": None if name == "num_gpu_blocks"
                             and not checked.pool_known else r.value,
                             "origin": r.origin, "why": r.why} for name, r in eff.values},
        "speculative": None if req.spec is None or checked.config is None
        else spec_sizes(req.spec, checked),
        "ignored_flags": list(req.ignored), "notes": list(notes),
        "warnings": [] if checked.config is None else list(warnings(checked.config, req)),
        "valid": err is None,
        "error": None if err is None else {"rule": err.rule, "message": str(err)},
        "scope": SCOPE,
        "model_kind": req.kind.to_json(),
        "outside_model": [f.name for f in req.deployment.outside_model()],
        "hazards": [r.to_json() for r in results],
    }


_SHOWN = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "block_size",
          "num_gpu_blocks")


def print_reasons(reasons: tuple[RuleReason, ...], as_json: bool) -> None:
    """--explain-rules: each rule, what dropping it lets happen, with the trace."""
    if as_json:
        print(json.dumps([r.to_json() for r in reasons], indent=1))
        return
    lines = ["why each SchedulerConfig rule exists (each rule dropped in turn, the others "
             "kept; minimal traces replayed on the reference):", ""]
    for r in reasons:
        lines.append(f"rule {r.rule}: {r.text} ({r.upstream})")
        lines.append(f"  [{r.verdict}] {r.detail}")
        if r.result is not None and r.result.witness is not None:
            cfg = r.result.witness.workload.config
            lines.append("      config with the rule dropped: " + " ".join(
                f"{k}={_show(v)}" for k, v in cfg.to_dict().items()
                if k in _SHOWN or v != getattr(Config(), k)))
            lines += _hazard_lines(r.result)[2:]
        lines.append("")
    print("\n".join(lines).rstrip())


def error_line(error: ConfigError) -> str:
    """The one-line error for an invalid configuration."""
    return f"batchproof: error: rule {error.rule}: {error}"


def write_error(error: ConfigError) -> None:
    """Print the invalid configuration's error line on stderr."""
    sys.stderr.write(error_line(error) + "\n")
