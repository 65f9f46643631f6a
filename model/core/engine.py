"""What the checker needs to know about one serving engine (or batching baseline).

Every engine supplies the three semantics of DESIGN.md with one shape, so bmc, induction,
the explorer, replay and simulate work on any engine:
- the rules: `initial_state`, `step` (branch-free over Ops), `same_behaviour`;
- the reference: `scheduler(cfg)` (an imperative scheduler object) and `observe`, which
  turns the reference's StepRecords into the Step observables properties read;
- the configuration: parse, print, validate.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from model.core.errors import ConfigError
from model.core.observe import StepFold
from model.core.ops import Bool, Ops
from model.core.types import RequestSpec, SlotSpec, Step, StepRecord, Workload


class ReferenceScheduler(Protocol):
    """An engine's reference scheduler: requests are added before a step, one `step()` is
    one scheduler iteration (schedule + model output + update)."""

    def add_request(self, spec: RequestSpec) -> None:
        """Add an arrived request (arrival order = call order)."""

    def step(self, eos_ids: frozenset[str] = frozenset()) -> StepRecord:
        """Run one iteration; `eos_ids` sample EOS in it (each must sample)."""

    def state_key(self, extra: Mapping[str, Hashable] | None = None) -> Hashable:
        """The scheduler's state as a hashable value in which requests are named by
        their canonical position, never by id, so that runs which differ only in the ids
        of interchangeable requests give the same key (the explorer's symmetry
        reduction). Two schedulers with equal keys must behave the same from here on.
        `extra[request_id]`, when given, is appended to that request's entry (the
        explorer keys property history per request this way)."""


@dataclass(frozen=True)
class EngineModel:
    """One engine: names, configuration, the rules and the reference."""

    name: str  # as the CLI and workload JSON spell it: "vllm-v1", "sglang", ...
    folder: str  # counterexamples/<folder>/
    title: str  # for people: "vLLM V1", "SGLang"
    version: str  # pinned upstream version or commit
    # configuration
    parse_config: Callable[[Any], Any]  # workload "config" object -> engine Config
    config_to_dict: Callable[[Any], dict[str, object]]
    rejection: Callable[[Any], ConfigError | None]  # the rule the engine rejects it by
    check_admissible: Callable[[Workload], None]  # InputError for requests it refuses
    # rules
    rule_config: Callable[[Any], Any]  # Config -> the rules' config (concrete)
    initial_state: Callable[[int, Any], Any]  # (num_slots, rule config) -> state
    step: Callable[[Ops, Any, Sequence[SlotSpec], Any, Sequence[Bool]], tuple[Any, Step]]
    same_behaviour: Callable[[Ops, Any, Any], Bool]
    # reference
    scheduler: Callable[[Any], ReferenceScheduler]
    observe: Callable[[Workload, Sequence[StepRecord]], tuple[Step, ...]]
    # optional: `observe` one record at a time, for searches that extend runs step by step
    observer: Callable[[Workload], StepFold] | None = None
    # optional: an inductive invariant of reachable states (enables k-induction), and
    # which rule configs it describes (default: all)
    well_formed: Callable[[Ops, Any, Sequence[SlotSpec], Any], Bool] | None = None
    invariant_covers: Callable[[Any], bool] | None = None
    # optional: whether the invariant's proof on a rule config takes seconds, not minutes
    # (default: always); `check` tries a slow one only when asked (--method induction)
    invariant_quick: Callable[[Any], bool] | None = None
    # optional: the invariant's conjuncts by name, to say which one a failed proof breaks
    invariant_facts: Callable[[Ops, Any, Sequence[SlotSpec], Any],
                              list[tuple[str, Bool]]] | None = None
    # optional: config families (a query ranges over these Config fields)
    ranged_fields: tuple[str, ...] = ()
    # (ops, base Config, field -> int or term) -> the rules' config over those values
    ranged_rule_config: Callable[[Ops, Any, Mapping[str, object]], Any] | None = None
    # (base Config, field -> int or term) -> constraints: the engine accepts the config
    family_constraints: Callable[[Any, Mapping[str, object]], list[Bool]] | None = None
    # (rule config, slots, depth, most tokens of one request) -> the rule config for such a
    # bounded query (a smaller state where the engine's shape allows it)
    within_bounds: Callable[[Any, int, int, int], Any] | None = None
    # (bounded rule config) -> None, or why the symbolic rules cannot take it (a state too
    # large for z3); BMC and induction then answer UNKNOWN with that reason
    symbolic_limit: Callable[[Any], str | None] | None = None
    # optional: (Config) -> None, or why only the reference scheduler covers this config
    # (the rules, and so BMC, induction, the theorems' premises and the array explorer, do
    # not): `check` then searches it with the reference explorer
    reference_only: Callable[[Any], str | None] | None = None
    # (Config) -> a config of far cheaper rules whose witnesses may carry over (the
    # reference with the full config decides each one), or None: BMC tries it first
    witness_config: Callable[[Any], Any | None] | None = None
    # optional: why a bounded rule config (after within_bounds) abstracts part of the state
    # (an over-approximation: a bounded HOLDS carries over to the exact rules, a witness
    # counts only once the reference confirms it), or None
    abstraction: Callable[[Any], str | None] | None = None
    # optional: the abstracted rule config of a rule config (an over-approximation whose
    # invariant proves quickly: Family.counted), or the config itself when there is none
    abstract_config: Callable[[Any], Any] | None = None
    # optional: one line of engine-specific facts for a step's text row
    describe_step: Callable[[StepRecord], str] | None = None
    # optional: after a reference step, the other environment choices that step could have
    # taken besides EOS (keyword arguments of the scheduler's `step`: e.g. speculative
    # decoding's accepted drafts), each scheduling the same; the explorer branches on them
    step_choices: Callable[[Any], Sequence[Mapping[str, Any]]] | None = None
    # optional: the engine's own driver of its reference over a whole workload, where the
    # workload carries environment choices model/run.py's generic loop does not pass
    # (vLLM V1: accepted drafts, the drafter's proposals, aborts, KV connector hits);
    # model/run.simulate uses it when set
    simulate: Callable[[Workload], tuple[StepRecord, ...]] | None = None
    # Step fields whose default states nothing (e.g. `assertion`) that the engine's rules
    # set even where they come out constant: it models what they observe
    sets_fields: tuple[str, ...] = ()
    # the docs' rules table: (upstream file:line, reference function, rules function)
    rules_table: tuple[tuple[str, str, str], ...] = ()
    extra: Mapping[str, object] | None = None
