"""The rules unrolled over z3: symbolic configuration families, request slots, environment
choices, and fresh state variables at each step boundary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace

import z3

from model.ops import Bool, SymbolicOps
from model.rules import vllm_v1 as rules
from model.state import (
    PREEMPTED,
    RUNNING,
    WAITING,
    Config,
    RuleConfig,
    SchedState,
    SlotSpec,
    SlotState,
    Step,
)

# Config fields that may be given a range (the rest are fixed per query).
RANGED_FIELDS = ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "num_gpu_blocks",
                 "long_prefill_token_threshold")


@dataclass(frozen=True, slots=True)
class Bounds:
    """The bounds of a query: request slots, steps, and the environment's number ranges."""

    slots: int = 3
    depth: int = 6
    max_prompt_len: int = 8
    max_max_tokens: int = 6
    max_priority: int = 1


@dataclass(frozen=True, slots=True)
class Family:
    """A configuration family: a base Config and inclusive ranges for some fields.

    `validated` restricts the family to configs vLLM's SchedulerConfig accepts.
    """

    base: Config
    ranges: tuple[tuple[str, int, int], ...] = ()
    validated: bool = True


@dataclass(slots=True)
class Unrolling:
    """Symbols and constraints of one unrolled query."""

    cfg: RuleConfig
    cfg_vars: dict[str, z3.ArithRef]
    specs: tuple[SlotSpec, ...]
    eos: list[tuple[Bool, ...]] = field(default_factory=list)
    states: list[SchedState] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    constraints: list[Bool] = field(default_factory=list)


def family_config(family: Family) -> tuple[RuleConfig, dict[str, z3.ArithRef], list[Bool]]:
    """The family as a RuleConfig with z3 constants for ranged fields, those constants,
    and their range (and, if validated, vLLM validation) constraints."""
    base = family.base
    vars_: dict[str, z3.ArithRef] = {}
    cons: list[Bool] = []
    values: dict[str, object] = {f.name: getattr(base, f.name) for f in fields(base)}
    for name, lo, hi in family.ranges:
        if name not in RANGED_FIELDS:
            raise ValueError(f"field {name} cannot be ranged; ranged fields: {RANGED_FIELDS}")
        v = z3.Int(f"cfg.{name}")
        vars_[name] = v
        cons += [v >= lo, v <= hi]
        values[name] = v
    cfg = RuleConfig.from_config(base)
    blocks = values["num_gpu_blocks"]
    wm = cfg.watermark_blocks
    if "num_gpu_blocks" in vars_ and base.watermark:
        # int(watermark * num_blocks) with a symbolic pool: floor of a rational product.
        wm = z3.ToInt(z3.RealVal(base.watermark) * blocks)
    budget = values["max_num_batched_tokens"]
    if base.max_num_scheduled_tokens is not None:
        budget = base.max_num_scheduled_tokens
    seqs = values["max_num_seqs"]
    cfg = replace(
        cfg, token_budget=budget, max_num_batched_tokens=values["max_num_batched_tokens"],
        max_num_seqs=seqs,
        max_num_active_reqs=seqs if base.max_num_active_seqs is None else base.max_num_active_seqs,
        max_model_len=values["max_model_len"], usable_blocks=blocks - 1, watermark_blocks=wm,
        long_prefill_token_threshold=values["long_prefill_token_threshold"])
    if family.validated:
        cons += validation_constraints(base, values)
    return cfg, vars_, cons


def validation_constraints(base: Config, values: dict[str, object]) -> list[Bool]:
    """vLLM's SchedulerConfig rules (vllm/config/scheduler.py:315-357) as constraints."""
    b, s, mml = values["max_num_batched_tokens"], values["max_num_seqs"], values["max_model_len"]
    out: list[Bool] = [b >= s, values["long_prefill_token_threshold"] <= mml]
    if not base.enable_chunked_prefill:
        out.append(b >= mml)
    if base.max_num_active_seqs is not None:
        out.append(base.max_num_active_seqs <= s)
    return [c for c in out if c is not True]


def slot_specs(num_slots: int, cfg: RuleConfig, bounds: Bounds | None = None
               ) -> tuple[tuple[SlotSpec, ...], list[Bool]]:
    """Symbolic request slots and their constraints. With `bounds`, lengths, arrivals and
    priorities are bounded as a BMC query needs; without, request lengths are unbounded
    (induction proofs)."""
    specs, cons = [], []
    for i in range(num_slots):
        p, m = z3.Int(f"r{i}.prompt_len"), z3.Int(f"r{i}.max_tokens")
        a = z3.Int(f"r{i}.arrival_step")
        pr = z3.Int(f"r{i}.priority") if cfg.policy_priority else 0
        # vLLM's input processor rejects prompt_len >= max_model_len.
        cons += [p >= 1, m >= 1, a >= 0, z3.Implies(a > 0, p < cfg.max_model_len)]
        if bounds is not None:
            cons += [p <= bounds.max_prompt_len, m <= bounds.max_max_tokens, a <= bounds.depth]
            if cfg.policy_priority:
                cons += [pr >= 0, pr <= bounds.max_priority]
        specs.append(SlotSpec(p, m, a, pr))
    # Canonical slot order: used slots first, in arrival order (slot index = arrival_time).
    for x, y in zip(specs, specs[1:], strict=False):
        cons.append(z3.Implies(x.arrival_step == 0, y.arrival_step == 0))
        cons.append(z3.Implies(y.arrival_step > 0, x.arrival_step <= y.arrival_step))
    return tuple(specs), cons


def fresh_state(tag: str, num_slots: int, step: object) -> SchedState:
    """A state of fresh z3 constants named `tag.*`; `step` is an int or a z3 term."""
    def iv(name: str) -> z3.ArithRef:
        return z3.Int(f"{tag}.{name}")
    slots = tuple(SlotState(*(iv(f"{i}.{f.name}") for f in fields(SlotState)))
                  for i in range(num_slots))
    return SchedState(slots=slots, free_blocks=iv("free"), next_run_key=iv("next_run_key"),
                      wait_head=iv("wait_head"), wait_tail=iv("wait_tail"), step=step)


def _bind(fresh: SchedState, value: SchedState) -> list[Bool]:
    cons = [fresh.free_blocks == value.free_blocks, fresh.next_run_key == value.next_run_key,
            fresh.wait_head == value.wait_head, fresh.wait_tail == value.wait_tail]
    for a, b in zip(fresh.slots, value.slots, strict=True):
        cons += [getattr(a, f.name) == getattr(b, f.name) for f in fields(SlotState)]
    return cons


def new_unrolling(family: Family, bounds: Bounds) -> Unrolling:
    """Symbols for a query: config family, request slots, the initial state."""
    cfg, cfg_vars, cons = family_config(family)
    specs, spec_cons = slot_specs(bounds.slots, cfg, bounds)
    init = SchedState.initial(bounds.slots, cfg.usable_blocks)
    return Unrolling(cfg=cfg, cfg_vars=cfg_vars, specs=specs, states=[init],
                     constraints=cons + spec_cons)


def extend(u: Unrolling) -> list[Bool]:
    """Add one step to the unrolling; return its new constraints."""
    t = len(u.steps)
    eos = tuple(z3.Bool(f"eos{t + 1}.{i}") for i in range(len(u.specs)))
    ops = SymbolicOps()
    nxt, observed = rules.step(ops, u.cfg, u.specs, u.states[-1], eos)
    fresh = fresh_state(f"s{t + 1}", len(u.specs), t + 1)
    cons = ops.take_definitions() + _bind(fresh, nxt)
    u.eos.append(eos)
    u.states.append(fresh)
    u.steps.append(observed)
    u.constraints += cons
    return cons


def same_behaviour(a: SchedState, b: SchedState) -> Bool:
    """Two states from which the scheduler behaves the same: equal slots and pool, queues in
    the same relative order. Key counters and preemption counts do not steer decisions."""
    cons: list[Bool] = [a.free_blocks == b.free_blocks]
    n = len(a.slots)
    for x, y in zip(a.slots, b.slots, strict=True):
        cons += [x.status == y.status, x.num_computed_tokens == y.num_computed_tokens,
                 x.num_output_tokens == y.num_output_tokens, x.blocks == y.blocks]
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            x, y = a.slots[i], a.slots[j]
            u, v = b.slots[i], b.slots[j]
            both_running = z3.And(x.status == RUNNING, y.status == RUNNING)
            both_waiting = z3.And(z3.Or(x.status == WAITING, x.status == PREEMPTED),
                                  z3.Or(y.status == WAITING, y.status == PREEMPTED))
            cons.append(z3.Implies(both_running,
                                   (x.run_key < y.run_key) == (u.run_key < v.run_key)))
            cons.append(z3.Implies(both_waiting,
                                   (x.wait_key < y.wait_key) == (u.wait_key < v.wait_key)))
    return z3.And(*cons)


def held_status(status: object) -> Bool:
    """The request has arrived and not finished."""
    return z3.Or(status == WAITING, status == RUNNING, status == PREEMPTED)


def present(specs: Sequence[SlotSpec]) -> list[Bool]:
    """Per slot: the request is used in this trace."""
    return [s.arrival_step > 0 for s in specs]
