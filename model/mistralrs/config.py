"""mistral.rs paged-attention scheduler configuration (pinned: commit 9e922623, after v0.9.2),
and the older versions as switches of the one rule set (MistralrsRules, VERSIONS).

Defaults are upstream's: 4096 tokens per step (`mistralrs-core/src/scheduler/mod.rs:21`),
8 decode steps before a prefill is due (mod.rs:22), 32 sequences (CLI `--max-seqs`,
`mistralrs-cli/src/args/mod.rs:573-576`), block size 32 (`paged_attention/mod.rs:44`), and
the 64-failed-attempts starvation escape (`paged_attention/scheduler.rs:48`). The number of
KV blocks comes from memory profiling upstream; 4096 is our default.

Scope (model/mistralrs/reference.py): a text model on CUDA with packed prefill, so prompt
chunks are scheduler-visible (engine/mod.rs:385) and uniform query length is not required
(pipeline/normal.rs:266-273); prefix caching off (`no_prefix_cache`, engine/mod.rs:418-420);
no speculative decoding, media, X-LoRA or hybrid cache.

Versions. `S:` is `mistralrs-core/src/paged_attention/scheduler.rs` at the version named.
Each switch of MistralrsRules is one rule that changed upstream (SWITCHES cites the commit
and the lines before and after); VERSIONS maps the modelled versions to their switches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from model.core.checks import check_config_int
from model.core.errors import ConfigError, InputError, refuse_unknown, shown
from model.core.switches import changed_switches, with_rules
from model.core.switches import with_switches as set_switches

ENGINE_MISTRALRS = "mistralrs"
MISTRALRS_COMMIT = "9e922623f24b"
PINNED = "9e922623"  # the version the bare engine name selects


@dataclass(frozen=True, slots=True)
class MistralrsRules:
    """Which form of each rule that changed upstream the scheduler runs; the defaults are
    the pinned commit's. Every switch is read by both the reference and the rules; SWITCHES
    says where upstream changed it. Combinations no release had are still defined (the
    refinement test draws them at random); docs/mistralrs_model.md says how."""

    victim_newest: bool = True  # bf86b7184: decoders oldest first, the newest is the victim
    reserve_next_token: bool = False  # c3667bb3f: a decoder asks for len() + 1 tokens
    bucket_by_length: bool = False  # 009afe4c3 .. 8010b6a05: only the shortest run
    alternate_turns: bool = True  # 8010b6a05: a prompt step is followed by a decode turn
    escape_loop: bool = True  # b0882bd75: the starvation escape preempts until the head fits
    token_budget: bool = True  # 48be6c1e2: budget, chunks, round robin, completion_is_due

    def changed(self, base: MistralrsRules) -> dict[str, bool]:
        """The switches whose value differs from `base`, by name."""
        return changed_switches(self, base)


@dataclass(frozen=True, slots=True)
class Switch:
    """One switch: the upstream change it follows, and what each value means."""

    name: str
    change: str  # commit (PR), the first version with it
    on: str  # what the scheduler does with the switch on, with upstream lines
    off: str  # ... and off


SWITCHES: tuple[Switch, ...] = (
    Switch("victim_newest", "bf86b7184 (#2250), first in v0.8.23",
           "decoders are allocated oldest first and the newest pending one is preempted "
           "(sort by timestamp, 9e922623 S:808, 1074-1078; v0.8.23 S:386-414)",
           "v0.8.22 S:588-593 reverses the timestamp order (the line S:592 the commit "
           "deletes): newest first, and `running.pop_back()` (S:412-414) preempts the oldest"),
    Switch("reserve_next_token", "c3667bb3f (#2295), first in v0.9.0 (switched off there)",
           "a decoder asks for len() + 1 tokens, one more than its KV needs (v0.8.23 "
           "S:396-402: unencoded_tail_len is set only by the block-diffusion sampler, "
           "pipeline/sampling.rs:524, so a text model takes the `len() + 1` arm)",
           "a decoder with an uncomputed token asks for len() (v0.9.0 S:399-400, 9e922623 "
           "S:818-824)"),
    Switch("bucket_by_length", "009afe4c3 (#1746, v0.7.0); a no-op for text models since "
           "8010b6a05 (#2354), first in v0.9.1",
           "bucket_and_preempt_sequences (v0.9.0 S:126-184) on the prompt batch (S:365) and "
           "on the decode rows (S:436-438): only the bucket of the shortest sequences runs, "
           "every other one is preempted to the waiting front",
           "v0.9.2 S:201-209 keys completions 0 (requires_uniform_completion_batch is false, "
           "pipeline/normal.rs:1934-1936) and packed-prefill prompts 0: one bucket"),
    Switch("alternate_turns", "8010b6a05 (#2354), first in v0.9.1",
           "a call after a prompt step decodes when anything runs (completion_turn_due, "
           "v0.9.2 S:278-284, set at S:478); not read with token_budget on (48be6c1e2 "
           "replaced it by completion_is_due, 9e922623 S:239-273)",
           "prefill first: every call tries admission before decoding (v0.9.0 S:193-382)"),
    Switch("escape_loop", "b0882bd75 (#2389), after v0.9.2",
           "after more than WAITING_TIMEOUT failures the head preempts running.pop_back() "
           "until it fits or nothing runs (9e922623 S:693-728)",
           "one victim and one retry, then the head is rejected with an error (v0.9.2 "
           "S:374-404)"),
    Switch("token_budget", "48be6c1e2 (#2390), after v0.9.2",
           "max_num_batched_tokens and max_decode_steps_before_prefill (scheduler/mod.rs:21-22)"
           ": the admission gate on |candidates| (S:589-593), chunks budget / #prompts "
           "(S:136-138), round-robin decode rows (S:298-326) and completion_is_due "
           "(S:239-273)",
           "no budget: admitted prompts run whole in one step (v0.9.2 S:454-484) and every "
           "kept decoder runs (S:604-607); the two fields are not read"),
)

_PINNED_RULES = MistralrsRules()
_V0_8_22 = MistralrsRules(victim_newest=False, reserve_next_token=True, bucket_by_length=True,
                          alternate_turns=False, escape_loop=False, token_budget=False)
_V0_8_23 = replace(_V0_8_22, victim_newest=True)
_V0_9_0 = replace(_V0_8_23, reserve_next_token=False)
_V0_9_2 = replace(_V0_9_0, bucket_by_length=False, alternate_turns=True)
_B0882BD75 = replace(_V0_9_2, escape_loop=True)

# Modelled versions, oldest first. Equal rule sets share an entry's switches: v0.9.1 and
# v0.9.2 differ only in metrics, 48be6c1e2 and 9e922623 likewise (S: diffs read with git).
# Not modelled: up to v0.9.0 the starvation escape's `waiting.pop_front()` (v0.9.0 S:344)
# takes the victim that `_preempt` has just pushed to the front (S:284-285), not the head,
# so the victim, with no blocks, joins the running batch in the head's place; 8010b6a05
# fixed it (v0.9.2 S:378-381). The model runs v0.9.2's escape for those versions, so their
# checks are exact while no head has failed more than waiting_timeout times.
VERSIONS: Mapping[str, MistralrsRules] = {
    "v0.8.22": _V0_8_22,
    "v0.8.23": _V0_8_23,
    "v0.9.0": _V0_9_0,
    "v0.9.1": _V0_9_2,
    "v0.9.2": _V0_9_2,
    "b0882bd75": _B0882BD75,
    "48be6c1e2": _PINNED_RULES,
    PINNED: _PINNED_RULES,
}


@dataclass(frozen=True, slots=True)
class MistralrsConfig:
    """The knobs the paged-attention scheduler reads (names as upstream spells them), and
    the version's rules.

    `waiting_timeout` is upstream's constant WAITING_TIMEOUT (scheduler.rs:48); it is a
    field so that bounded checks can reach the starvation escape in a few steps; it must be
    at least 1 (with 0, two sequences that cannot fit together would preempt each other
    forever inside one schedule() call; upstream's 64 never does).
    `num_gpu_blocks` includes the null block (kv_cache_manager.rs:107-110).
    `version` names the VERSIONS entry the config was made for and `rules` its switches
    (different from that entry's only when a switch was toggled, `diff --ablate`).
    """

    max_num_batched_tokens: int = 4096
    max_num_seqs: int = 32
    max_decode_steps_before_prefill: int = 8
    block_size: int = 32
    num_gpu_blocks: int = 4096
    waiting_timeout: int = 64
    rules: MistralrsRules = field(default_factory=MistralrsRules)
    version: str = PINNED

    @property
    def token_budget(self) -> int:
        """Tokens per step (scheduler/mod.rs:21)."""
        return self.max_num_batched_tokens

    @property
    def usable_blocks(self) -> int:
        """Allocatable blocks: the pool less the null block (kv_cache_manager.rs:107-110)."""
        return self.num_gpu_blocks - 1

    @property
    def token_capacity(self) -> int:
        """The up-front size check's capacity, num_gpu_blocks * block_size
        (scheduler.rs:605-619); one block more than can ever be allocated."""
        return self.num_gpu_blocks * self.block_size

    def to_dict(self) -> dict[str, object]:
        """The config as workload JSON spells it: the knobs, and under "rules" the switches
        that differ from its version's (none, unless one was toggled)."""
        return with_rules({name: getattr(self, name) for name in FIELDS}, self.rules,
                          VERSIONS[self.version])


FIELDS: tuple[str, ...] = tuple(f.name for f in fields(MistralrsConfig)
                                if f.name not in ("rules", "version"))
SWITCH_NAMES: tuple[str, ...] = tuple(f.name for f in fields(MistralrsRules))
_MINIMUM = {"max_num_batched_tokens": 1, "max_num_seqs": 1, "max_decode_steps_before_prefill": 1,
            "block_size": 1, "num_gpu_blocks": 2, "waiting_timeout": 1}


def parse_config(raw: Any, version: str = PINNED) -> MistralrsConfig:
    """Overlay a JSON object of mistral.rs field names on the defaults of `version`; an
    optional "rules" object toggles switches of that version's rules."""
    if not isinstance(raw, dict):
        raise InputError("'config' must be a JSON object of mistral.rs field names, got "
                         f"{shown(raw)}")
    refuse_unknown(raw, {*FIELDS, "rules"}, "unknown mistralrs config field",
                   f"known fields: {', '.join(FIELDS)}, rules")
    knobs = {k: v for k, v in raw.items() if k != "rules"}
    for name, value in knobs.items():
        check_config_int("mistralrs", name, value, _MINIMUM[name])
    rules = with_switches(VERSIONS[version], raw.get("rules", {}))
    return replace(MistralrsConfig(rules=rules, version=version), **knobs)


def with_switches(rules: MistralrsRules, changes: Any) -> MistralrsRules:
    """`rules` with the switches `changes` names set (a JSON object of booleans)."""
    return set_switches(rules, changes, "mistralrs")


def rejection(cfg: MistralrsConfig) -> ConfigError | None:
    """The scheduler's own asserts (scheduler.rs:105-107): every knob positive. parse_config
    already refuses non-positive values, so a parsed config is never rejected."""
    for name in ("max_num_seqs", "max_num_batched_tokens", "max_decode_steps_before_prefill"):
        if getattr(cfg, name) < 1:
            return ConfigError("positive_fields", f"{name} must be > 0 (scheduler.rs:105-107)")
    return None
