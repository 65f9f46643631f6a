"""Checks of a workload that every engine's reference makes before it simulates, and the
size limits of every input (docs/simulation_contract.md, "Limits"): each keeps a run's
time and memory bounded, so that no input makes a command hang."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from model.core.errors import InputError, shown
from model.core.types import Workload

MAX_INT = 2**63 - 1  # every integer of a workload, config or flag fits in 64 bits
MAX_STEPS = 100_000  # steps of one simulation
MAX_REQUESTS = 10_000  # requests (and eos entries) of one workload
# Requests x steps of one run: the reference's records hold every queue of every step, so
# time and memory grow with the product (10^6: a few seconds and a few hundred MB).
MAX_REQUEST_STEPS = 1_000_000
MAX_NESTING = 32  # JSON/YAML nesting; the deepest batchproof document nests 6 levels
# YAML aliases (*name) of one document, and its values (scalars, lists, mappings) once each
# alias is expanded: a few hundred bytes of nested aliases (the "billion laughs") expand to
# tens of millions of values. batchproof's own YAML files use no alias.
MAX_YAML_ALIASES = 100
MAX_YAML_NODES = 1_000_000
MAX_FILE_BYTES = 64 * 2**20  # an input file


def check_config_int(engine: str, name: str, value: object, minimum: int) -> None:
    """An integer field `name` of `engine`'s config ("baseline", "mistralrs"): an int, not a
    bool, from `minimum` to MAX_INT; else an InputError naming the bound it misses."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{engine} config {name} must be an integer, got {shown(value)}")
    if value < minimum:
        raise InputError(f"{engine} config {name} must be >= {minimum}, got {value}; use a "
                         "larger value")
    if value > MAX_INT:
        raise InputError(f"{engine} config {name} must be at most {MAX_INT} (64 bits), got "
                         f"{shown(value)}")


def check_eos_steps(workload: Workload) -> None:
    """An eos entry must name a step that is simulated and not precede the request's
    arrival; whether the request samples in that step is checked while simulating."""
    arrival = {r.id: r.arrival_step for r in workload.requests}
    for index, e in enumerate(workload.eos):
        if e.step > workload.steps:
            raise InputError(
                f"eos[{index}] names step {e.step} for request {e.id!r}, but the workload "
                f"runs {workload.steps} steps; raise 'steps' or drop the entry")
        if e.step < arrival[e.id]:
            raise InputError(
                f"eos[{index}] names step {e.step} for request {e.id!r}, which arrives at "
                f"step {arrival[e.id]}; the request samples no token before it arrives")


def check_size(workload: Workload) -> None:
    """The workload is within MAX_REQUEST_STEPS: requests that arrive within the run times
    the steps it runs."""
    arriving = sum(r.arrival_step <= workload.steps for r in workload.requests)
    if arriving * workload.steps > MAX_REQUEST_STEPS:
        raise InputError(
            f"the workload runs {arriving} requests for {workload.steps} steps, "
            f"{arriving * workload.steps} request-steps, more than the {MAX_REQUEST_STEPS} "
            "one run may have (docs/simulation_contract.md, limits); lower 'steps' or split "
            "the requests")


def check_nesting(doc: Any, where: str, fix: str, syntax: str = "JSON") -> None:
    """InputError when lists and objects in `doc` (read from `syntax`, JSON or YAML) nest
    deeper than MAX_NESTING (walked without recursion, so any depth is refused cleanly)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list | tuple | set | frozenset):
            children = value
        else:
            continue
        if depth > MAX_NESTING:
            raise InputError(f"{where} nests {syntax} too deeply (lists and objects more than "
                             f"{MAX_NESTING} levels deep, more than any batchproof input "
                             f"has); {fix}")
        stack.extend((child, depth + 1) for child in children)


class _BoundedLoader(yaml.SafeLoader):
    """yaml.SafeLoader that counts, while it composes, the aliases and the values the
    document expands to (an alias counts every value of the node it names), and stops at
    MAX_YAML_ALIASES or MAX_YAML_NODES before anything walks the expanded document."""

    def __init__(self, text: str, where: str, fix: str) -> None:
        super().__init__(text)
        self.where, self.fix = where, fix
        self.aliases = 0
        self.values = 0
        self.sizes: dict[int, int] = {}  # id(anchored node) -> values it expands to

    def compose_node(self, parent: Any, index: Any) -> Any:
        """PyYAML's compose_node, counting the values and aliases it composes."""
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            line = event.start_mark.line + 1
            node = super().compose_node(parent, index)  # PyYAML's undefined-alias error
            size = self.sizes.get(id(node))
            if size is None:
                raise InputError(f"{self.where}: alias *{event.anchor} at line {line} is "
                                 "inside the value it names (a recursive YAML value, "
                                 f"endless once expanded); {self.fix}")
            self.aliases += 1
            if self.aliases > MAX_YAML_ALIASES:
                raise InputError(f"{self.where}: alias *{event.anchor} at line {line} is "
                                 f"one more than the {MAX_YAML_ALIASES} YAML aliases a "
                                 f"document may use; {self.fix}")
            self._count(size, f"alias *{event.anchor} at line {line}")
            return node
        start = self.values
        self._count(1, f"the value at line {event.start_mark.line + 1}")
        node = super().compose_node(parent, index)
        if getattr(event, "anchor", None) is not None:
            self.sizes[id(node)] = self.values - start
        return node

    def _count(self, values: int, what: str) -> None:
        self.values += values
        if self.values > MAX_YAML_NODES:
            raise InputError(f"{self.where}: at {what} the YAML holds more than "
                             f"{MAX_YAML_NODES:,} values once its aliases are expanded (an "
                             f"alias counts every value it names: an alias bomb?); {self.fix}")


def read_input(path: str | Path, fix: str) -> bytes:
    """The bytes of an input file, at most MAX_FILE_BYTES: a one-line InputError naming
    `path` when it cannot be read, or naming the limit and `fix` when it is larger."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}; check the path") from None
    if len(data) > MAX_FILE_BYTES:
        raise InputError(f"{path} is larger than {MAX_FILE_BYTES // 2**20} MiB; {fix}")
    return data


def load_yaml(text: str, where: str, fix: str) -> Any:
    """yaml.safe_load of `text` within MAX_YAML_ALIASES and MAX_YAML_NODES, counted while
    the document is composed, so that a tiny file of nested aliases is refused in
    milliseconds instead of expanding to millions of values: an InputError naming the
    alias, its line, the limit and `fix`. PyYAML's own errors (yaml.YAMLError,
    RecursionError for a deep document, ValueError for a number too long) pass through; a
    caller that catches ValueError must let InputError, one, through first."""
    loader = _BoundedLoader(text, where, fix)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
