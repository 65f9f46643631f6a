"""The rules unrolled over z3: symbolic configuration families, request slots, environment
choices, and fresh state variables at each step boundary. Engine-generic: the engine's
rules, initial state and behaviour equivalence come from its EngineModel."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import Any, TypeVar

import z3

from model import registry as engines
from model.core.engine import EngineModel
from model.core.ops import Bool, SymbolicOps
from model.core.types import DEFAULT_ENGINE, SlotSpec, Step

#: z3's random seed in every query: same command, same result.
Z3_SEED = 0

T = TypeVar("T")


def carried(owner: Any, slot: str, key: object, make: Callable[[], T]) -> T:
    """What `make()` gives, made once and carried in `owner`'s `slot` (a field of a frozen
    dataclass, default None, kept out of equality, hashing and repr) beside the `key` it
    was made for: made again only when the key changed (`replace` copies the slot) or
    the slot was emptied (unpickling: `without_carried`)."""
    held = getattr(owner, slot)
    if held is None or held[0] != key:
        held = (key, make())
        object.__setattr__(owner, slot, held)
    return held[1]


def without_carried(owner: Any, slots: Sequence[str]) -> list[object]:
    """`owner`'s fields in order, those in `slots` emptied: the pickled state of a frozen
    dataclass with `carried` objects (an EngineModel need not pickle, and a worker looks it
    up again once)."""
    return [None if f.name in slots else getattr(owner, f.name) for f in fields(owner)]


def restore(owner: Any, state: Sequence[object]) -> None:
    """Set a frozen dataclass's fields from `without_carried`'s state (unpickling)."""
    for f, value in zip(fields(owner), state, strict=True):
        object.__setattr__(owner, f.name, value)


@dataclass(frozen=True, slots=True)
class Bounds:
    """The bounds of a query: request slots, steps, and the environment's number ranges."""

    slots: int = 3
    depth: int = 6
    max_prompt_len: int = 8
    max_max_tokens: int = 6
    max_priority: int = 1
    max_cached_prefix_len: int = 0  # SGLang LPM: 0 keeps every cached prefix empty
    prefix_groups: int = 0  # vLLM's prefix cache: groups requests may share a prefix in
    arrival_window: int = 0  # requests arrive in steps 1..A (0: in any step up to depth)
    no_eos: bool = False  # True: no request samples EOS (each runs to its max_tokens)
    # A KV connector's premise (0: none): the worker reports every asynchronous load at
    # the latest in the d-th step after the step that started it (finished or failed).
    kv_load_steps: int = 0

    def last_arrival(self) -> int:
        """The last step a request may arrive in: the arrival window, within the depth."""
        if self.arrival_window <= 0:
            return self.depth
        return min(self.arrival_window, self.depth)


@dataclass(frozen=True, slots=True)
class Family:
    """A configuration family: a base Config and inclusive ranges for some fields.

    `validated` restricts the family to configs the engine accepts. Ranges are supported
    for the fields an engine names in `EngineModel.ranged_fields` (vLLM V1's today); other
    engines' families are single configs.

    `model` is the engine's EngineModel, looked up by name once per family (and carried
    through `replace`); it is no part of the family's equality or hash, which key the
    proof caches, and is not pickled.
    """

    base: Any
    ranges: tuple[tuple[str, int, int], ...] = ()
    validated: bool = True
    engine: str = DEFAULT_ENGINE
    # The engine's abstracted rules (EngineModel.abstract_config, an over-approximation)
    # instead of its exact ones: what k-induction proves there holds on the exact rules.
    counted: bool = False
    _model: tuple[str, EngineModel] | None = field(default=None, compare=False, repr=False)

    @property
    def model(self) -> EngineModel:
        """The family's engine, looked up in the registry on first use only."""
        return carried(self, "_model", self.engine, lambda: engines.get(self.engine))

    def __getstate__(self) -> list[object]:
        return without_carried(self, ("_model",))

    def __setstate__(self, state: Sequence[object]) -> None:
        restore(self, state)


@dataclass(slots=True)
class Unrolling:
    """Symbols and constraints of one unrolled query."""

    engine: EngineModel
    cfg: Any
    cfg_vars: dict[str, z3.ArithRef]
    specs: tuple[SlotSpec, ...]
    eos: list[tuple[Bool, ...]] = field(default_factory=list)
    # speculative decoding: per step and slot (drafts accepted, drafts proposed)
    spec: list[tuple[tuple[z3.ArithRef, z3.ArithRef], ...]] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    constraints: list[Bool] = field(default_factory=list)
    eos_allowed: bool = True  # False (Bounds.no_eos): every step's EOS choices are false
    # A KV connector (a rule config with `kv_connector`): per slot the connector's answer
    # (hit tokens, async), fixed for the run, and per step and slot the worker's load
    # report (reported, failed); empty without one.
    kv_hits: tuple[tuple[z3.ArithRef, z3.BoolRef], ...] = ()
    kv_reports: list[tuple[tuple[z3.BoolRef, z3.BoolRef], ...]] = field(default_factory=list)
    kv_load_steps: int = 0  # Bounds.kv_load_steps


def family_config(family: Family) -> tuple[Any, dict[str, z3.ArithRef], list[Bool]]:
    """The family as the engine's rule config with z3 constants for ranged fields, those
    constants, and their range (and, if validated, the engine's validation) constraints."""
    engine = family.model
    if not family.ranges:
        return _abstracted(family, engine.rule_config(family.base)), {}, []
    if not engine.ranged_fields:
        raise ValueError(f"config ranges are not supported for {family.engine}: its model "
                         "has no ranged config fields")
    base = family.base
    vars_: dict[str, z3.ArithRef] = {}
    cons: list[Bool] = []
    values: dict[str, object] = {name: getattr(base, name) for name in engine.ranged_fields}
    for name, lo, hi in family.ranges:
        if name not in engine.ranged_fields:
            raise ValueError(f"field {name} cannot be ranged; ranged fields: "
                             f"{engine.ranged_fields}")
        v = z3.Int(f"cfg.{name}")
        vars_[name] = v
        cons += [v >= lo, v <= hi]
        values[name] = v
    assert engine.ranged_rule_config is not None
    cfg = engine.ranged_rule_config(SymbolicOps(), base, values)
    if family.validated and engine.family_constraints is not None:
        cons += engine.family_constraints(base, values)
    return _abstracted(family, cfg), vars_, cons


def _abstracted(family: Family, cfg: Any) -> Any:
    engine = family.model
    if not family.counted or engine.abstract_config is None:
        return cfg
    return engine.abstract_config(cfg)


def choice_kwargs(cfg: Any, specs: Sequence[SlotSpec], tag: str) -> dict[str, object]:
    """The keyword arguments of one symbolic step's environment choices besides EOS that
    a rule config has: an abstracted pool's choices per slot (e.g. vLLM's counted prefix
    cache: hits and frees), any integers, which the rules clamp to what the exact pool
    allows."""
    names = getattr(cfg, "pool_choices", ())
    if not names:
        return {}
    return {"pool": tuple(tuple(z3.Int(f"{tag}.{i}.{name}") for name in names)
                          for i in range(len(specs)))}


def longest_prompt(cfg: Any) -> Any:
    """The longest prompt the engine's input checks let reach its scheduler: the rule
    config's `longest_prompt` where it has one (vLLM V0 accepts max_model_len itself),
    else max_model_len - 1 (vLLM V1's input processor rejects prompt_len >= max_model_len,
    input_processor.py:574-602)."""
    return getattr(cfg, "longest_prompt", cfg.max_model_len - 1)


def slot_specs(num_slots: int, cfg: Any, bounds: Bounds | None = None
               ) -> tuple[tuple[SlotSpec, ...], list[Bool]]:
    """Symbolic request slots and their constraints. With `bounds`, lengths, arrivals and
    priorities are bounded as a BMC query needs; without, request lengths are unbounded
    (induction proofs)."""
    specs, cons = [], []
    for i in range(num_slots):
        p, m = z3.Int(f"r{i}.prompt_len"), z3.Int(f"r{i}.max_tokens")
        a = z3.Int(f"r{i}.arrival_step")
        pr = z3.Int(f"r{i}.priority") if cfg.policy_priority else 0
        cons += [p >= 1, m >= 1, a >= 0, z3.Implies(a > 0, p <= longest_prompt(cfg))]
        if bounds is not None:
            cons += [p <= bounds.max_prompt_len, m <= bounds.max_max_tokens,
                     a <= bounds.last_arrival()]
            if cfg.policy_priority:
                cons += [pr >= 0, pr <= bounds.max_priority]
        c: object = 0
        if bounds is not None and bounds.max_cached_prefix_len > 0:
            c = z3.Int(f"r{i}.cached_prefix_len")
            cons += [c >= 0, c <= bounds.max_cached_prefix_len, c <= p]
        g: object = 0
        shared: object = 0
        if bounds is not None and bounds.prefix_groups > 0:
            # A request in group g > 0 shares its first `shared` prompt tokens with the
            # group's other requests; group 0 shares nothing.
            g, shared = z3.Int(f"r{i}.prefix_group"), z3.Int(f"r{i}.shared_prefix_len")
            cons += [g >= 0, g <= bounds.prefix_groups, z3.Implies(g == 0, shared == 0),
                     z3.Implies(g > 0, z3.And(shared >= 1, shared <= p))]
        specs.append(SlotSpec(p, m, a, pr, c, g, shared))
    # Canonical slot order: used slots first, in arrival order (slot index = arrival_time).
    for x, y in zip(specs, specs[1:], strict=False):
        cons.append(z3.Implies(x.arrival_step == 0, y.arrival_step == 0))
        cons.append(z3.Implies(y.arrival_step > 0, x.arrival_step <= y.arrival_step))
    return tuple(specs), cons


def fresh_state(tag: str, template: Any, step: object) -> Any:
    """A state shaped like `template` (an engine's state dataclass) whose leaves are fresh
    z3 constants named `tag.<path>`: Bool for a Python bool leaf, Int otherwise. Tuples of
    slot dataclasses are walked; the `step` field takes `step` (an int or a z3 term)."""
    return _fresh(tag, template, step)


def _fresh(path: str, value: Any, step: object) -> Any:
    if is_dataclass(value):
        return replace(value, **{
            f.name: step if f.name == "step" else _fresh(f"{path}.{f.name}",
                                                         getattr(value, f.name), step)
            for f in fields(value)})
    if isinstance(value, tuple):
        return tuple(_fresh(f"{path}.{i}", v, step) for i, v in enumerate(value))
    if isinstance(value, bool) or z3.is_bool(value):
        return z3.Bool(path)
    return z3.Int(path)


def as_term(value: object) -> object:
    """A Python constant as a z3 term (a z3 term as it is), so that `==` and `!=` build a
    formula even between two constants."""
    if isinstance(value, bool):
        return z3.BoolVal(value)
    if isinstance(value, int):
        return z3.IntVal(value)
    return value


def bind_state(fresh: Any, value: Any) -> list[Bool]:
    """fresh == value, leaf by leaf over a state's dataclasses and tuples (the `step`
    counter is not bound); a leaf may be a z3 term or a Python constant."""
    if is_dataclass(fresh):
        out: list[Bool] = []
        for f in fields(fresh):
            if f.name != "step":
                out += bind_state(getattr(fresh, f.name), getattr(value, f.name))
        return out
    if isinstance(fresh, tuple):
        return [c for a, b in zip(fresh, value, strict=True) for c in bind_state(a, b)]
    return [as_term(fresh) == as_term(value)]


def beyond_symbolic(family: Family, bounds: Bounds) -> str | None:
    """None when the engine's symbolic rules take this bounded query, else why not."""
    engine = family.model
    if engine.symbolic_limit is None:
        return None
    cfg = engine.rule_config(family.base)
    if engine.within_bounds is not None:
        cfg = engine.within_bounds(cfg, bounds.slots, bounds.depth,
                                   bounds.max_prompt_len + bounds.max_max_tokens)
    return engine.symbolic_limit(cfg)


def abstracted(family: Family, bounds: Bounds) -> str | None:
    """Why the engine's rules take this bounded query with part of the state abstracted
    (an over-approximation: HOLDS carries over, a witness only once the reference
    confirms it), or None when they take it exactly."""
    engine = family.model
    if engine.abstraction is None or engine.within_bounds is None:
        return None
    cfg = engine.within_bounds(engine.rule_config(family.base), bounds.slots, bounds.depth,
                               bounds.max_prompt_len + bounds.max_max_tokens)
    return engine.abstraction(cfg)


def new_unrolling(family: Family, bounds: Bounds) -> Unrolling:
    """Symbols for a query: config family, request slots, the initial state."""
    engine = family.model
    cfg, cfg_vars, cons = family_config(family)
    if engine.within_bounds is not None:
        cfg = engine.within_bounds(cfg, bounds.slots, bounds.depth,
                                   bounds.max_prompt_len + bounds.max_max_tokens)
    specs, spec_cons = slot_specs(bounds.slots, cfg, bounds)
    init = engine.initial_state(bounds.slots, cfg)
    hits, hit_cons = connector_hits(cfg, specs)
    return Unrolling(engine=engine, cfg=cfg, cfg_vars=cfg_vars, specs=specs, states=[init],
                     constraints=cons + spec_cons + hit_cons, eos_allowed=not bounds.no_eos,
                     kv_hits=hits, kv_load_steps=bounds.kv_load_steps if hits else 0)


def connector_hits(cfg: Any, specs: Sequence[SlotSpec]
                   ) -> tuple[tuple[tuple[z3.ArithRef, z3.BoolRef], ...], list[Bool]]:
    """With a KV connector (a rule config with `kv_connector`), each slot's external hit:
    0..prompt_len tokens, loaded asynchronously or not; none otherwise."""
    if not getattr(cfg, "kv_connector", False):
        return (), []
    hits = tuple((z3.Int(f"r{i}.kv_hit"), z3.Bool(f"r{i}.kv_async"))
                 for i in range(len(specs)))
    cons = [c for (tokens, _), spec in zip(hits, specs, strict=True)
            for c in (tokens >= 0, tokens <= spec.prompt_len)]
    return hits, cons


def extend(u: Unrolling) -> list[Bool]:
    """Add one step to the unrolling; return its new constraints."""
    t = len(u.steps)
    eos = tuple(z3.Bool(f"eos{t + 1}.{i}") for i in range(len(u.specs)))
    ops = SymbolicOps()
    k = getattr(u.cfg, "num_spec_tokens", 0)
    spec_cons: list[Bool] = []
    choices: dict[str, object] = {}
    if k:  # the verifier's and the drafter's choices, 0..k each
        spec = tuple((z3.Int(f"acc{t + 1}.{i}"), z3.Int(f"drafts{t + 1}.{i}"))
                     for i in range(len(u.specs)))
        spec_cons = [c for a, d in spec for c in (a >= 0, a <= k, d >= 0, d <= k)]
        choices["spec"] = spec
        u.spec.append(spec)
    choices.update(choice_kwargs(u.cfg, u.specs, f"pool{t + 1}"))
    if u.kv_hits:  # the worker's load reports of this step's output
        reports = tuple((z3.Bool(f"kv{t + 1}.{i}.report"), z3.Bool(f"kv{t + 1}.{i}.failed"))
                        for i in range(len(u.specs)))
        choices["kv"] = (u.kv_hits, reports)
        u.kv_reports.append(reports)
        spec_cons += load_premise(u, reports)
    nxt, observed = u.engine.step(ops, u.cfg, u.specs, u.states[-1], eos,
                                  **choices)  # type: ignore[call-arg]
    fresh = fresh_state(f"s{t + 1}", u.states[0], t + 1)
    cons = ops.take_definitions() + bind_state(fresh, nxt) + spec_cons
    if not u.eos_allowed:
        cons += [z3.Not(e) for e in eos]
    u.eos.append(eos)
    u.states.append(fresh)
    u.steps.append(observed)
    u.constraints += cons
    return cons


def load_premise(u: Unrolling, reports: Sequence[tuple[z3.BoolRef, z3.BoolRef]]
                 ) -> list[Bool]:
    """Bounds.kv_load_steps = d: a slot whose load has been in flight at the last d step
    boundaries (it started d steps ago or earlier) is reported in this step."""
    d = u.kv_load_steps
    if not d or len(u.states) < d + 1:  # the initial state has no load
        return []
    recent = u.states[-d:]
    return [z3.Implies(z3.And(*[_as_bool(s.slots[i].kv[0].loading) for s in recent]), report)
            for i, (report, _) in enumerate(reports)]


def _as_bool(value: object) -> Bool:
    return z3.BoolVal(value) if isinstance(value, bool) else value


def same_behaviour(u: Unrolling, a: Any, b: Any) -> Bool:
    """The engine's behaviour equivalence of two states, as one z3 term."""
    ops = SymbolicOps()
    same = u.engine.same_behaviour(ops, a, b)
    return z3.And(*ops.take_definitions(), z3.BoolVal(same) if isinstance(same, bool) else same)


def present(specs: Sequence[SlotSpec]) -> list[Bool]:
    """Per slot: the request is used in this trace."""
    return [s.arrival_step > 0 for s in specs]
