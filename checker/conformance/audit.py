"""`batchproof audit`: the real scheduler of the engine installed here (a release, or a
developer's own checkout installed with `pip install -e`) driven through every workload
batchproof knows how to make, each run checked three ways.

Sources (`SOURCES`), audited in this order by default (`counterexamples` and `random` in
the order `Options.sources` lists them, `witnesses` always last):
- `counterexamples`: the workload of every stored counterexample
  (counterexamples/<folder>/*.itf.json, `#meta.workload`);
- `random`: the conformance generator, in each mode of `checker.conformance.modes` (the
  harness's modes for other engines), seeds `seed .. seed + count - 1`;
- `witnesses`: the workloads BMC finds violating a property: every property the manifest
  records VIOLATED somewhere, on every validated configuration of the default suite, at
  small bounds (the entry's own where there is one); cached by the sources of the model,
  the properties and the methods, since they are a pure function of them. Their
  searches run in the background from the start (`BackgroundWitnesses`), so they come
  last and never hold up the first finding.
A group's first workload is the one its finding shrinks, so listing `random` first makes
every finding the random workloads reach a shrink of a random workload.

For every workload: (a) every catalogue property the engine's manifest names is decided
on the real trace (`checker.methods.trace_check`, the engine's `observe`); (b) the trace
is compared step by step with the reference; (c) an exception the real engine raises (or
a run that outlasts `timeout_s`) is caught and recorded with the workload and the
raising frame's file:line inside the engine's package; one raised by batchproof's own
driver (its consistency checks of what the engine did) is told apart as a driver error.
An engine assertion (the `assertion` fact of a step, or the statement a crash was raised
at) is identified by its meaning, `Site`: its file, function and condition or statement
text, read from the source the engine ran; the line is shown but not compared, so a
patch that only moves lines changes nothing (`compare_by_meaning`, `Crash.signature`).
When the reference refuses a choice of the workload as the real run applied it (an EOS
for a request the reference does not schedule in that step), the run has already parted
from the reference there: the refused choices are dropped and the step compared
(`compare_past_refusals`); a workload the reference refuses as input is not a finding
about the engine, only counted (`Report.refused`).

A symptom is a divergence, a new property violation or a crash. A violation is *new*
when the manifest expects the property to hold on the workload's config, or when the
reference does not show the same violation at the same step; otherwise it is *expected*
(the model predicts it and the manifest knows it) and only counted. Symptoms are grouped
by cause (`Cause`): the first rule at which the real engine and the reference part, as
the harness locates it (`Harness.locate`; vLLM: `checker.conformance.parting`, the
statement where the two paths through the step part, or the decision whose value
differs, or the statement changed from the pinned release that the real engine ran on its
way there), else the first differing observable's rule. A violation on a workload that
diverges at or before the violating step is a follow-on of that divergence and folds
under its group, as does a crash whose workload parts from the reference at the same
rule. A finding is one group: the first workload of each is shrunk to a minimal one that
shows the same symptom and handed to `on_finding` as soon as it is described, while the
audit goes on (`audit`); the report has every group with its final counts.

With BATCHPROOF_AUDIT_MEMO=DIR, what is decided of a run that agrees with the reference
(its properties and their classification) is kept in DIR, keyed by the run itself, and
read back by a later audit whose engine runs the same workload the same way
(`OutcomeMemo`): tests/test_audit.py's mutation audits, where most workloads of a mutant
run as on the unmodified release, share one.

The engine harnesses are rows of `HARNESSES`: an engine plugs in with a driver (run a
workload, compare a run with the reference), a generator, a shrinker, its map from
differing fields to rules-table rows and, optionally, a locator of causes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import logging
import os
import pickle
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, fields, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from checker.conformance.causes import Cause, cited_lines, refused_choice, without_choice
from checker.conformance.divergence import value_text
from checker.conformance.parting import enclosing
from checker.conformance.shrink import tidy
from checker.methods import proof_cache
from checker.methods.trace_check import (
    VIOLATED,
    TraceMismatch,
    TraceVerdict,
    check_trace,
    first_violation,
    observe,
    properties_for,
)
from model import registry as engines
from model.core.errors import InputError
from model.core.types import StepRecord, Workload
from model.workload import parse_workload, workload_to_json
from properties import catalogue
from properties.catalogue import Property
from properties.manifest import Case, Manifest, load

SOURCES = ("counterexamples", "witnesses", "random")
DIVERGENCE, VIOLATION, CRASH, DRIVER_ERROR = "divergence", "violation", "crash", "driver"
ROOT = Path(__file__).resolve().parents[2]
COUNTEREXAMPLES = ROOT / "counterexamples"
# Bounds of a witness search whose (property, config) is no manifest entry: two
# requests and four steps find the short witnesses in seconds.
WITNESS_SLOTS, WITNESS_DEPTH = 2, 4
#: A crash of the engine outside its package (the driver's own consistency checks).
DRIVER = "driver"
#: How many workloads of one raw signature must give the same cause before the rest are
#: grouped by the signature alone, without locating their cause (`_Groups`).
CONFIRMATIONS = 3


class Unavailable(InputError):
    """The engine's real scheduler cannot run here (not installed, does not import)."""


class EngineTimeout(Exception):
    """The real engine did not finish a workload in time (raised by SIGALRM)."""


# ----------------------------------------------------------------------------- causes

def observable_cause(h: Harness, divergence: Any, real: Sequence[StepRecord]) -> Cause:
    """A cause by the first differing observable alone, for an engine whose harness does
    not locate one (or when it finds none): the narrowest rules-table row of the rule
    involved, its upstream lines read from the installed package where they are."""
    rows = rules_involved(h, divergence, real)
    first = next((f for g in _CAUSE_ORDER for f in divergence.fields if f in g),
                 divergence.fields[0] if divergence.fields else "error")
    upstream, reference, _ = rows[0]
    cited, _, span = upstream.split()[0].partition(":")
    lo, _, hi = span.partition("-")
    home = _package_dir(h.package)
    lines: tuple[tuple[int, str], ...] = ()
    if home is not None and lo.isdigit():
        rel = cited.removeprefix(f"{h.package}/")
        lines = cited_lines(Path(home) / rel, [(int(lo), int(hi or lo))])
    return Cause(key=f"observable:{first}:{reference}", how="observable", file=cited,
                 function=reference, line=None, statement="", lines=lines,
                 detail=f"the first field that differs is {first}; the rule is told by the "
                        "observable alone", step=divergence.step, rows=rows)


# ------------------------------------------------------------------------- harnesses

@dataclass(frozen=True)
class Harness:
    """How audit drives one engine's real scheduler.

    `run(workload)` returns the real run (its `records`, `effective(workload)`: the workload
    as the run applied it);
    `compare(workload, run)` the first divergence from the reference (an object with
    `step`, `fields`, `real`, `reference`, `error`, `workload` (what the reference ran),
    `summary()` and `render()`), or None; `generate(mode, seed, steps)` a random workload;
    `shrink(w, fails, max_calls)` the shrinker; `field_rules` maps a differing field to
    the rules table's reference functions, most specific first (`rules_for` refines it);
    `locate(h, workload, reference_workload, step)` the cause of a workload whose real
    run (of `workload`) parts from the reference's (of `reference_workload`) on or before
    `step`, or None when it cannot tell (then `observable_cause`)."""

    engine: str
    package: str  # the engine's top-level package: a crash names its frame inside it
    modes: tuple[str, ...]
    unavailable: Callable[[], str | None]
    run: Callable[[Workload], Any]
    compare: Callable[[Workload, Any], Any]
    generate: Callable[[str, int, int], Workload]
    shrink: Callable[[Workload, Callable[[Workload], bool], int], Workload]
    field_rules: Mapping[str, tuple[str, ...]]
    rules_for: Callable[[Harness, Any, Sequence[StepRecord]], tuple[str, ...]] | None = None
    # the harness for an older release the engine models, found installed (see `audit`)
    at_release: Callable[[Harness, str], Harness] | None = None
    locate: Callable[[Harness, Workload, Workload, int], Cause | None] | None = None

    @property
    def model(self) -> Any:
        """The engine's EngineModel."""
        return engines.get(self.engine)


def _vllm_harness() -> Harness:
    from checker.conformance.compare import compare_run
    from checker.conformance.modes import MODES
    from checker.conformance.shrink import shrink
    from checker.conformance.vllm_real import run_real_vllm_detailed, vllm_unavailable_reason

    s = "VllmV1Scheduler."

    def by_meaning(w: Workload, run: Any) -> Any:
        return compare_by_meaning(compare_run, w, run, _package_dir("vllm"))

    return Harness(
        # The connector mode is conformance only: some properties the audit checks
        # describe the engine without a connector (a preempted request at the very head
        # of the waiting loop, a whole prompt with chunking off), tests/test_connector.py.
        engine="vllm-v1", package="vllm",
        modes=tuple(m for m in MODES if not m.startswith("connector")),
        unavailable=vllm_unavailable_reason, run=run_real_vllm_detailed,
        compare=lambda w, run: compare_past_refusals(by_meaning, w, run),
        generate=lambda mode, seed, steps: MODES[mode].generate(seed, steps),
        shrink=lambda w, fails, calls: shrink(w, fails, max_calls=calls),
        field_rules={
            "preempted": (f"{s}_pop_victim", f"{s}_preempt_request"),
            "admitted": (f"{s}_schedule_waiting", f"{s}_allocate_slots"),
            "resumed": (f"{s}_schedule_waiting", f"{s}_allocate_slots"),
            "finished": (f"{s}_check_stop", f"{s}_update_from_output"),
            "free_blocks": (f"{s}_allocate_slots", f"{s}_free_request"),
            "running": (f"{s}_schedule_running", f"{s}_preempt_request"),
            "waiting": ("FcfsQueue", "PriorityQueue", f"{s}_preempt_request"),
            "error": (f"{s}_schedule",),
            # a cache fact (`extra`): the KV manager's allocation with prefix hits
            "": (f"{s}_allocate_slots",),
        },
        rules_for=_vllm_rules_for, at_release=_vllm_at_release, locate=_vllm_locate)


def _vllm_locate(h: Harness, workload: Workload, reference_workload: Workload, step: int
                 ) -> Cause | None:
    """vLLM's cause: where the two paths part (`checker.conformance.parting`)."""
    from checker.conformance import parting

    home = _package_dir(h.package)
    return parting.locate(h, workload, reference_workload, step, home) if home else None


def _vllm_at_release(h: Harness, version: str) -> Harness:
    """vLLM's harness for the older release `version` the model has as rule switches,
    installed here (an overlay: checker/conformance/vllm_overlay.py): the engine
    `vllm-v1@VERSION` (its manifest entries and stored counterexamples), every random
    workload at that release's switches (`generate.at_release`), and only the modes
    without speculative decoding or KV cache groups, which the model has for its pinned
    release alone (as `python -m checker.conformance --vllm-version`)."""
    from checker.conformance.generate import at_release
    from checker.conformance.modes import MODES

    modes = tuple(m for m in h.modes  # speculative decoding, KV cache groups and the
                  # KV connector: 0.32.0 only
                  if not any(f.startswith(("spec:", "kv:", "connector:"))
                             for f in MODES[m].features))
    return replace(h, engine=f"{engines.base_name(h.engine)}@{version}", modes=modes,
                   generate=lambda mode, seed, steps: at_release(
                       MODES[mode].generate(seed, steps), version))


#: Differing fields by how directly they show a scheduling decision: the first group a
#: divergence has names the rule involved; the later ones are mostly its consequences
#: (a request scheduled differently finishes, frees blocks and queues differently).
_CAUSE_ORDER: tuple[frozenset[str], ...] = (
    frozenset({"preempted"}), frozenset({"admitted", "resumed"}),
    frozenset({"scheduled", "num_computed_tokens", "token_budget_left"}),
    frozenset({"free_blocks"}), frozenset({"finished"}), frozenset({"waiting", "running"}),
)


def _vllm_rules_for(h: Harness, divergence: Any, real: Sequence[StepRecord]
                    ) -> tuple[str, ...]:
    """vLLM's rules for a divergence: those of the first group of `_CAUSE_ORDER` among
    its fields (a cache fact when none is), the tokens of a step told apart by the queue
    the differing request was in when the step began (the running loop,
    scheduler.py:657-858, or the waiting loop, 912-1369)."""
    s = "VllmV1Scheduler."
    differing = set(divergence.fields)
    group = next((g & differing for g in _CAUSE_ORDER if g & differing), frozenset({""}))
    if "scheduled" in group or "num_computed_tokens" in group or "token_budget_left" in group:
        a = dict(divergence.real.scheduled) if divergence.real is not None else {}
        b = dict(divergence.reference.scheduled) if divergence.reference is not None else {}
        ids = {r for r in {*a, *b} if a.get(r, 0) != b.get(r, 0)}
        before = real[divergence.step - 2] if 2 <= divergence.step <= len(real) + 1 else None
        was_running = ({*before.running} - {r for r, _ in before.finished}
                       if before is not None else set())
        names = []
        if ids & was_running:
            names += [f"{s}_schedule_running", "running_num_new_tokens"]
        if ids - was_running or not ids:
            names += [f"{s}_schedule_waiting", f"{s}_allocate_slots"]
        return tuple(names)
    return tuple(dict.fromkeys(n for f in sorted(group) for n in h.field_rules.get(f, ())))


def _sglang_harness() -> Harness:
    from checker.conformance import sglang_real
    from checker.conformance.sglang_generate import SIZES, random_sglang_workload, shrink

    # The runner has no public name for comparing a run it already made; this is it.
    compare_run = sglang_real._against_reference
    return Harness(
        engine="sglang", package="sglang", modes=SIZES,
        unavailable=sglang_real.sglang_unavailable_reason,
        run=sglang_real.run_real_sglang_detailed, compare=compare_run,
        generate=lambda mode, seed, _steps: random_sglang_workload(seed, mode),
        shrink=lambda w, fails, calls: shrink(w, fails, max_calls=calls),
        field_rules={
            "scheduled": ("SGLangScheduler._get_new_batch_prefill", "PrefillAdder.add_one_req"),
            "admitted": ("PrefillAdder.add_one_req", "SGLangScheduler._get_new_batch_prefill"),
            "preempted": ("SGLangScheduler._retract_decode",),
            "finished": ("SGLangScheduler._process_results",),
            "running": ("SGLangScheduler._update_running_batch",),
            "waiting": ("SGLangScheduler._sort_waiting",),
            "free_blocks": ("PrefillAdder.budget_state, _charge",),
            "error": ("SGLangScheduler._get_new_batch_prefill",),
            "": ("PrefillAdder.budget_state, _charge",),
        })


#: engine name -> its harness (built on first use: each imports its driver).
HARNESSES: dict[str, Callable[[], Harness]] = {
    "vllm-v1": _vllm_harness,
    "sglang": _sglang_harness,
}


def harness(engine: str) -> Harness:
    """The harness of `engine`; InputError naming the audited engines for another, and
    Unavailable (one line) when its driver has not landed or its engine does not run."""
    if engine not in HARNESSES:
        engines.get(engine)  # an unknown engine: InputError naming the engines
        raise InputError(f"audit drives the real scheduler of {', '.join(HARNESSES)}; "
                         f"there is no harness for {engine!r}")
    try:
        h = HARNESSES[engine]()
    except ImportError as exc:
        raise Unavailable(f"audit --engine {engine} is not available yet: its harness does "
                          f"not import ({exc})") from None
    return h


def rules_involved(h: Harness, divergence: Any, real: Sequence[StepRecord]
                   ) -> tuple[tuple[str, str, str], ...]:
    """The rules-table rows (upstream file:line, reference function, rules function) of
    the rule a divergence involves, most specific first (at most four)."""
    if divergence.error is not None:  # the reference raised: its step as a whole
        names = h.field_rules.get("error", ())
    elif h.rules_for is not None:
        names = h.rules_for(h, divergence, real)
    else:
        differing = set(divergence.fields)
        group = next((g & differing for g in _CAUSE_ORDER if g & differing), {""})
        names = tuple(dict.fromkeys(n for f in sorted(group)
                                    for n in h.field_rules.get(f, ())))
    table = h.model.rules_table
    rows = [row for name in dict.fromkeys(names) for row in table if row[1] == name]
    return tuple(dict.fromkeys(rows))[:4] or tuple(table[:1])


# ------------------------------------------------------- engine assertions by meaning

@dataclass(frozen=True, slots=True)
class Site:
    """A statement of the engine by meaning: its file (inside the package), its function
    (`Class.method`) and its text (an assertion's condition). `line` is information, shown
    but never compared: a patch that moves the statement leaves it the same site."""

    file: str
    function: str
    text: str
    line: int | None = field(default=None, compare=False)

    def __str__(self) -> str:
        at = f":{self.line}" if self.line is not None else ""
        return f"{self.file}{at} in {self.function}: {self.text}"


#: The engine assertions the vLLM reference reaches, by the site its `assertion` fact
#: names (`scheduler.py:LINE`, vLLM 0.32.0, the release the model is pinned to): the
#: reference has no source to read, so its sites are named here.
REFERENCE_ASSERTIONS: Mapping[tuple[str, int], Site] = {
    # vllm 0.32.0 v1/core/sched/scheduler.py:1371-1372 (vllm-project/vllm#54028)
    ("scheduler.py", 1372): Site("vllm/v1/core/sched/scheduler.py", "Scheduler.schedule",
                                 "num_new_tokens == 1 + self.num_spec_tokens", 1372),
    # vllm 0.32.0 v1/core/sched/scheduler.py:1169-1170: reached by a prefix hit of every
    # token, which kv_cache_manager.py:289-300 caps away (vllm-project/vllm#30320)
    ("scheduler.py", 1170): Site("vllm/v1/core/sched/scheduler.py", "Scheduler.schedule",
                                 "num_new_tokens > 0", 1170),
}
#: The file an `assertion` fact names, inside the vllm package: the driver words only
#: assertions of v1/core/sched/scheduler.py (checker/conformance/vllm_real.py).
_FACT_FILES: Mapping[str, str] = {"scheduler.py": "v1/core/sched/scheduler.py"}
_FACT = re.compile(r"^(?P<file>[\w./]+):(?P<line>\d+) AssertionError: (?P<rest>.*)$", re.S)
#: The part of a fact that says which request and tokens, as the reference words it.
_DETAIL = re.compile(r"^(?P<detail>request .*?) \(assert .*\)$", re.S)


@functools.lru_cache(maxsize=32)
def _source(path: str, mtime_ns: int, size: int) -> tuple[tuple[str, ...], ast.Module | None]:
    """The lines of the source file `path` and its syntax tree (None when it does not
    parse), cached per version of the file."""
    try:
        text = Path(path).read_text()
    except (OSError, ValueError):
        return (), None
    try:
        tree = ast.parse(text, path)
    except (SyntaxError, ValueError):
        tree = None
    return tuple(text.split("\n")), tree


def site_in_source(path: Path, line: int, file: str) -> Site:
    """The site of the statement at `line` of the source file `path` (named `file`): the
    innermost function holding it, qualified by its classes, and for an `assert` its
    condition (ast.unparse), else the line's text."""
    try:
        stat = path.stat()
    except OSError:
        return Site(file, "?", "?", line)
    lines, tree = _source(str(path), stat.st_mtime_ns, stat.st_size)
    text = lines[line - 1].strip() if 1 <= line <= len(lines) else "?"
    names, statement = enclosing(tree, line)
    if isinstance(statement, ast.Assert):
        text = ast.unparse(statement.test)
    return Site(file, ".".join(names) or "<module>", text, line)


def assertion_site(fact: str, home: str | None) -> tuple[Site, str] | None:
    """(site, detail) of a real run's `assertion` fact, its site read from the engine's
    source under `home` (the imported package's folder); None for a fact in another
    form. `detail` is the request and tokens where the fact words them, else ""."""
    found = _FACT.match(fact)
    if found is None or home is None:
        return None
    rel = _FACT_FILES.get(found["file"], found["file"])
    site = site_in_source(Path(home) / rel, int(found["line"]), f"vllm/{rel}")
    return site, _detail(found["rest"])


def reference_assertion_site(fact: str) -> tuple[Site, str] | None:
    """(site, detail) of the reference's `assertion` fact (`REFERENCE_ASSERTIONS`)."""
    found = _FACT.match(fact)
    if found is None:
        return None
    site = REFERENCE_ASSERTIONS.get((found["file"], int(found["line"])))
    return (site, _detail(found["rest"])) if site is not None else None


def _detail(rest: str) -> str:
    found = _DETAIL.match(rest)
    return found["detail"] if found is not None else ""


def same_assertion(real: str, reference: str, home: str | None) -> bool:
    """The real fact and the reference's name one assertion: the same file, function and
    condition (whatever its line), and the same request and tokens where both word them
    (the driver words them only at the line of the pinned release)."""
    a, b = assertion_site(real, home), reference_assertion_site(reference)
    if a is None or b is None:
        return real == reference
    return a[0] == b[0] and (not a[1] or not b[1] or a[1] == b[1])


def compare_by_meaning(compare: Callable[[Workload, Any], Any], workload: Workload, run: Any,
                       home: str | None) -> Any:
    """`compare(workload, run)` with an engine assertion told apart by meaning, not by
    line (`same_assertion`): where the first divergence is one in the `assertion` fact and
    both facts name the same assertion, the real records take the reference's wording of
    it and are compared again; a divergence left shows the real records as they were."""
    divergence = compare(workload, run)
    if (divergence is None or divergence.error is not None
            or "assertion" not in divergence.fields
            or divergence.real is None or divergence.reference is None):
        return divergence
    real = dict(divergence.real.extra).get("assertion")
    reference = dict(divergence.reference.extra).get("assertion")
    if not (isinstance(real, str) and isinstance(reference, str)
            and same_assertion(real, reference, home)):
        return divergence
    original = run.records
    worded = tuple(replace(r, extra=tuple((k, reference if (k, v) == ("assertion", real) else v)
                                          for k, v in r.extra)) for r in original)
    again = compare(workload, replace(run, records=worded))
    if again is None or again.real is None or again.step > len(original):
        return again
    return replace(again, real=original[again.step - 1])


def compare_past_refusals(compare: Callable[[Workload, Any], Any], workload: Workload,
                          run: Any) -> Any:
    """`compare(workload, run)`, going on past the reference's refusal of a choice the real
    run took (an EOS where the reference does not sample, accepted drafts it did not
    schedule): records agree up to that step, so the two runs part there, and the refusal
    only hides how. The refused choice is dropped from the workload the reference runs
    (the real run is the same run) and the step compared again, until no such refusal
    is left; the divergence carries the workload the reference ran. A refusal of
    anything else (the workload itself) is returned as it is."""
    divergence = compare(workload, run)
    for _ in range(len(workload.eos) + len(workload.accepted) + len(workload.drafts)):
        refused = refused_choice(divergence.error if divergence is not None else None)
        if refused is None:
            return divergence
        smaller = without_choice(workload, refused)
        if smaller is None:
            return divergence
        workload = smaller
        divergence = compare(workload, run)
    return divergence


# --------------------------------------------------------------------------- sources

@dataclass(frozen=True, slots=True)
class AuditWorkload:
    """A workload to audit and where it came from (`source` is one of SOURCES)."""

    workload: Workload
    source: str
    label: str
    seed: int | None = None


def stored_counterexamples(engine: str, folder: Path = COUNTEREXAMPLES
                           ) -> tuple[AuditWorkload, ...]:
    """The workload of every stored counterexample of `engine`, by file name."""
    out = []
    for path in sorted((folder / engines.get(engine).folder).glob("*.itf.json")):
        doc = json.loads(path.read_text())
        meta = doc["#meta"]
        if "rules" in meta["workload"].get("config", {}) or meta.get("engine") != engine:
            # A variant of the model's rules, or another release's (`engine@version`):
            # the installed engine runs neither.
            continue
        workload = parse_workload(doc["#meta"]["workload"])
        out.append(AuditWorkload(workload, "counterexamples", str(path.relative_to(ROOT))
                                 if path.is_relative_to(ROOT) else str(path)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class WitnessJob(Case):
    """One BMC search for a workload violating `property` on a manifest config."""

    bounds: tuple[tuple[str, int], ...]
    timeout_s: float

    @property
    def label(self) -> str:
        """`bmc starvation k=3 on tiny_priority`."""
        name = " ".join([self.property, *(f"{k}={v}" for k, v in self.params)])
        return f"bmc {name} on {self.config}"


def witness_jobs(engine: str, timeout_s: float, manifest: Manifest | None = None
                 ) -> tuple[WitnessJob, ...]:
    """Every property the manifest records VIOLATED for `engine` (each parameterisation)
    on every validated config of its default-suite entries (see the module doc)."""
    manifest = manifest if manifest is not None else load()
    entries = [e for e in manifest.entries if e.engine == engine]
    violated = dict.fromkeys((e.property, e.params) for e in entries
                             if e.expected == VIOLATED)
    # A config with switched rules ("rules" in its JSON) is a variant of the model (a bug
    # class, an older release): the installed engine cannot run it, so it gives no witness.
    to_dict = engines.get(engine).config_to_dict
    configs = [c for c in dict.fromkeys(e.config for e in entries if e.suite == "default")
               if manifest.configs[c].validated
               and "rules" not in to_dict(manifest.configs[c].config)]
    jobs = []
    for prop, params in violated:
        for name in configs:
            nc = manifest.configs[name]
            entry = next((e for e in entries if e.suite == "default" and
                          (e.property, e.params, e.config) == (prop, params, name)), None)
            bounds = dict(nc.bounds)
            if entry is not None:
                bounds.update(entry.bounds)
            else:
                bounds["slots"] = min(bounds.get("slots", WITNESS_SLOTS), WITNESS_SLOTS)
                bounds["depth"] = min(bounds.get("depth", WITNESS_DEPTH), WITNESS_DEPTH)
            jobs.append(WitnessJob(engine, prop, params, name, tuple(sorted(bounds.items())),
                                   timeout_s))
    return tuple(jobs)


def run_witness_job(job: WitnessJob) -> tuple[str, dict[str, Any] | None, float]:
    """(BMC status, the violating workload as JSON or None, seconds) of one search."""
    from checker.methods import bmc
    from checker.methods.symbolic import Bounds, Family

    nc = load().configs[job.config]
    prop = catalogue.get(job.property, **dict(job.params))
    result = bmc.check(prop, Family(nc.config, nc.ranges, nc.validated, nc.engine),
                       Bounds(**dict(job.bounds)), job.timeout_s)
    workload = workload_to_json(result.workload) if result.workload is not None else None
    return result.status, workload, result.seconds


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/batchproof (~/.cache/batchproof), the proofs' cache home too."""
    return proof_cache.cache_home()


@dataclass(frozen=True, slots=True)
class Witnesses:
    """The witness workloads, the searches that ended UNKNOWN, and how they were got."""

    workloads: tuple[AuditWorkload, ...]
    unknown: tuple[str, ...]
    searches: int
    seconds: float
    cached: bool


def _witness_plan(engine: str, timeout_s: float, cache_dir: Path | None
                  ) -> tuple[tuple[WitnessJob, ...], Path | None, list[Any] | None,
                             dict[int, tuple[str, dict[str, Any] | None, float]]]:
    """(the searches, their cache file, their results when the cache or the shipped file
    has them all, else the results the shipped file gives for some of them)."""
    todo = witness_jobs(engine, timeout_s)
    key = hashlib.sha256(repr((proof_cache.sources_key(), todo)).encode()).hexdigest()[:20]
    path = cache_dir / f"witnesses-{engine}-{key}.json" if cache_dir is not None else None
    results: list[Any] | None = None
    if path is not None and path.is_file():
        try:
            results = [tuple(r) for r in json.loads(path.read_text())]
        except (OSError, ValueError):
            results = None
    if results is not None and len(results) == len(todo):
        return todo, path, results, {}
    known = shipped_results(engine, todo)
    if len(known) == len(todo):
        return todo, path, [known[i] for i in range(len(todo))], {}
    return todo, path, None, known


# The witness searches' results shipped with batchproof (python -m checker.conformance.audit
# --write-witnesses), so a CI runner with a cold cache does not search them anew.
SHIPPED_WITNESSES = ROOT / "checker" / "conformance" / "witnesses"


def _plan_key(todo: Sequence[WitnessJob]) -> str:
    """What a search's result depends on: the sources and the searches, not their time
    limit (the shipped results were searched with a longer one)."""
    plan = [replace(j, timeout_s=0.0) for j in todo]
    return hashlib.sha256(repr((proof_cache.sources_key(), plan)).encode()).hexdigest()[:20]


def shipped_results(engine: str, todo: Sequence[WitnessJob]
                    ) -> dict[int, tuple[str, dict[str, Any] | None, float]]:
    """The shipped results usable for `todo`, by index: all of them when the file was
    written from these sources and searches; otherwise only the witnesses that still
    violate their property when replayed on the reference (a search that found none, or a
    lasso a finite replay cannot confirm, is searched again)."""
    path = SHIPPED_WITNESSES / f"{engine}.json"
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    fresh = doc.get("key") == _plan_key(todo)
    by_job = {(e["label"], json.dumps(e["bounds"])): e for e in doc.get("results", ())}
    out: dict[int, tuple[str, dict[str, Any] | None, float]] = {}
    for i, job in enumerate(todo):
        e = by_job.get((job.label, json.dumps([list(b) for b in job.bounds])))
        if e is None or (e["status"] == "unknown" and not fresh):
            continue
        if fresh or (e["workload"] is not None and _still_violates(job, e["workload"])):
            out[i] = (e["status"], e["workload"], 0.0)
    return out


def _still_violates(job: WitnessJob, doc: dict[str, Any]) -> bool:
    """The witness, replayed on the current reference, violates the job's property."""
    from model.run import simulate

    try:
        workload = parse_workload(doc)
        verdicts = check_trace(job.engine, workload, simulate(workload),
                               (catalogue.get(job.property, **dict(job.params)),))
    except Exception:  # noqa: BLE001 - a witness the model no longer runs is searched again
        return False
    return any(v.verdict == "VIOLATED" for v in verdicts)


def write_shipped_witnesses(engine: str, timeout_s: float, jobs: int) -> Path:
    """Search every witness of `engine` (no cache) and write the shipped file."""
    todo = witness_jobs(engine, timeout_s)
    with ProcessPoolExecutor(max(1, jobs), mp_context=get_context("spawn")) as pool:
        results = list(pool.map(run_witness_job, todo))
    SHIPPED_WITNESSES.mkdir(parents=True, exist_ok=True)
    path = SHIPPED_WITNESSES / f"{engine}.json"
    doc = {"schema": 1, "engine": engine, "key": _plan_key(todo), "timeout_s": timeout_s,
           "results": [{"label": j.label, "bounds": [list(b) for b in j.bounds],
                        "status": status, "workload": workload, "seconds": round(sec, 2)}
                       for j, (status, workload, sec) in zip(todo, results, strict=True)]}
    path.write_text(json.dumps(doc, indent=0, sort_keys=True) + "\n")
    return path


def _store(path: Path | None, results: list[Any]) -> None:
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results))
        except OSError:
            pass  # a cache that cannot be written only costs the next run time


def _witnesses(todo: Sequence[WitnessJob], results: Sequence[Any], start: float,
               cached: bool) -> Witnesses:
    found, unknown, seen = [], [], set()
    for job, (status, doc, _) in zip(todo, results, strict=True):
        if status == "unknown":
            unknown.append(job.label)
        if doc is None:
            continue
        workload = parse_workload(doc)
        if workload not in seen:
            seen.add(workload)
            found.append(AuditWorkload(workload, "witnesses", job.label))
    return Witnesses(tuple(found), tuple(unknown), len(todo), time.monotonic() - start,
                     cached)


def witnesses(engine: str, timeout_s: float, jobs: int = 2,
              cache_dir: Path | None = None) -> Witnesses:
    """Run (or read from `cache_dir`) every witness search of `engine`."""
    start = time.monotonic()
    todo, path, results, known = _witness_plan(engine, timeout_s, cache_dir)
    if results is not None:
        return _witnesses(todo, results, start, True)
    rest = [j for i, j in enumerate(todo) if i not in known]
    if jobs > 1 and len(rest) > 1:
        # spawn: the parent may already hold the engine (torch), which fork would copy
        with ProcessPoolExecutor(jobs, mp_context=get_context("spawn")) as pool:
            searched = iter(pool.map(run_witness_job, rest))
    else:
        searched = iter([run_witness_job(j) for j in rest])
    results = [known[i] if i in known else next(searched) for i in range(len(todo))]
    _store(path, results)
    return _witnesses(todo, results, start, False)


class BackgroundWitnesses:
    """The witness searches of `engine` running in `jobs` spawned processes while the
    audit goes on (or read from the cache at once): `result()` waits for them, `cancel()`
    drops those not started (an audit that stopped early)."""

    def __init__(self, engine: str, timeout_s: float, jobs: int, cache_dir: Path | None
                 ) -> None:
        self.start = time.monotonic()
        self.todo, self.path, results, self.known = _witness_plan(engine, timeout_s,
                                                                  cache_dir)
        self.done = (_witnesses(self.todo, results, self.start, True)
                     if results is not None else None)
        self.pool: ProcessPoolExecutor | None = None
        rest = [(i, j) for i, j in enumerate(self.todo) if i not in self.known]
        if self.done is None and rest:
            self.pool = ProcessPoolExecutor(max(1, jobs), mp_context=get_context("spawn"))
            self.futures = {i: self.pool.submit(run_witness_job, j) for i, j in rest}
        elif self.done is None:
            results = [self.known[i] for i in range(len(self.todo))]
            self.done = _witnesses(self.todo, results, self.start, True)

    def result(self) -> Witnesses:
        """The searches' workloads (waiting for the searches; the cache written)."""
        if self.done is None:
            assert self.pool is not None
            results = [self.known[i] if i in self.known else self.futures[i].result()
                       for i in range(len(self.todo))]
            self.pool.shutdown()
            _store(self.path, results)
            self.done = _witnesses(self.todo, results, self.start, False)
        return self.done

    def cancel(self) -> Witnesses:
        """Stop waiting: the searches not started are dropped (none is reported)."""
        if self.done is None and self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)
            self.done = Witnesses((), (), len(self.todo), time.monotonic() - self.start, False)
        assert self.done is not None
        return self.done


def random_workloads(h: Harness, modes: Sequence[str], seed: int, count: int, steps: int
                     ) -> Iterator[AuditWorkload]:
    """`count` generated workloads per mode, seeds `seed ..`, the modes interleaved."""
    for i in range(count):
        for mode in modes:
            yield AuditWorkload(h.generate(mode, seed + i, steps), "random",
                                f"random {mode} seed {seed + i}", seed + i)


# ------------------------------------------------------------------ one workload

@dataclass(frozen=True, slots=True)
class Crash:
    """The real engine raised (or outlasted the time limit) on a workload.

    `where` is the innermost frame inside the engine's package (`vllm/...py:812 in f`),
    or the driver's frame when the engine's own code was not on the stack; `stack` the
    engine's frames, outermost first; `step` the step being run (None: setting up, or a
    driver that does not say); `records` the steps completed before it."""

    error: str
    where: str
    stack: tuple[str, ...]
    step: int | None
    records: tuple[StepRecord, ...]
    timeout: bool = False
    site: Site | None = None  # `where` by meaning: file, function, statement
    driver: bool = False  # raised by batchproof's driver, not by the engine

    @property
    def kind(self) -> str:
        """CRASH, or DRIVER_ERROR for one of the driver's own checks."""
        return DRIVER_ERROR if self.driver else CRASH

    @property
    def signature(self) -> str:
        """What two crashes share to be one finding: the exception's type and the site
        it was raised at by meaning (file, function, statement: the line is not part of
        it), else `where`."""
        if self.timeout:
            return "crash:timeout"
        at = (f"{self.site.file} in {self.site.function}: {self.site.text}"
              if self.site is not None else self.where)
        return f"{self.kind}:{self.error.split(':', 1)[0]}:{at}"

    @property
    def summary(self) -> str:
        """One line: the engine raised (or hung), or batchproof's driver stopped the run."""
        at = f"at step {self.step}" if self.step is not None else "outside the steps"
        if self.driver:
            return (f"batchproof's driver stopped the run {at}: its check at {self.where} "
                    f"failed, {self.error} (a driver error: the engine did something the "
                    "driver cannot record, or the driver is wrong)")
        what = "did not finish in time" if self.timeout else f"raised {self.error}"
        return f"the real engine {what} {at} ({self.where})"


def _package_dir(package: str) -> str | None:
    module = sys.modules.get(package)
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) if path else None


def crash_of(h: Harness, exc: BaseException) -> Crash:
    """The Crash an exception out of `h.run` describes (its traceback's frames)."""
    frames = list(traceback.walk_tb(exc.__traceback__))
    home = _package_dir(h.package)
    drivers = str(Path(__file__).parent) + os.sep
    inside = []
    site = None
    step, records = None, ()
    for frame, line in frames:
        file = frame.f_code.co_filename
        if home is not None and file.startswith(home + os.sep):
            rel = f"{h.package}/{os.path.relpath(file, home)}"
            inside.append(f"{rel}:{line} in {frame.f_code.co_name}")
            site = site_in_source(Path(file), line, rel)
        elif file.startswith(drivers):
            got = frame.f_locals.get("step")
            if isinstance(got, int) and not isinstance(got, bool):
                step = got
                kept = frame.f_locals.get("records")
                if isinstance(kept, list) and all(isinstance(r, StepRecord) for r in kept):
                    records = tuple(kept)
    innermost = frames[-1][0].f_code.co_filename if frames else ""
    # The driver's own check raised (the innermost frame is the driver's, even when the
    # engine called into it, as its probes are): the driver's error, not the engine's.
    driver = not isinstance(exc, EngineTimeout) and innermost.startswith(drivers)
    if inside and not driver:
        where = inside[-1]
    else:
        frame, line = frames[-1] if frames else (None, 0)
        name = (os.path.relpath(frame.f_code.co_filename, ROOT)
                if frame is not None else "?")
        where = f"{name}:{line} in {frame.f_code.co_name}" if frame is not None else "?"
        if not driver:
            where = f"{DRIVER} {where}"
        if frame is not None:
            site = site_in_source(Path(frame.f_code.co_filename), line,
                                  name if driver else f"{DRIVER} {name}")
    text = f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]
    return Crash(text, where, tuple(inside), step, records, isinstance(exc, EngineTimeout),
                 site, driver)


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise EngineTimeout in the block after `seconds` (main thread only; 0: none)."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(_signum: int, _frame: object) -> None:
        raise EngineTimeout(f"no result within {seconds:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclass(frozen=True, slots=True)
class Violation:
    """A property violated on the real trace; `new` unless the manifest and the
    reference both account for it (`why` says which). `shown`: the reference violates it
    at the same step (always so when the two agree up to that step); a new violation the
    reference does not show is a follow-on of the divergence before it."""

    verdict: TraceVerdict
    new: bool
    why: str
    shown: bool = True

    @property
    def signature(self) -> str:
        """What two violations share to be one finding."""
        return f"violation:{self.verdict.name}"

    @property
    def follow_on(self) -> bool:
        """A new violation that only the divergence before it explains."""
        return self.new and not self.shown


@dataclass(frozen=True, slots=True)
class Outcome:
    """One workload audited. `compared` is the workload as compared (EOS entries that
    took no effect on the real run dropped); `skipped` why it was not run (the engine
    refuses it), `refused` why the reference refuses it as input (then it is not
    compared: it says nothing of the engine)."""

    audited: AuditWorkload
    compared: Workload | None = None
    records: tuple[StepRecord, ...] = ()
    divergence: Any = None
    verdicts: tuple[TraceVerdict, ...] = ()
    violations: tuple[Violation, ...] = ()
    crash: Crash | None = None
    skipped: str = ""
    refused: str = ""
    trace_note: str = ""
    engine_seconds: float = 0.0
    batchproof_seconds: float = 0.0

    def findings(self, h: Harness) -> tuple[tuple[str, str], ...]:
        """(kind, raw signature) of each symptom on this workload: a crash by its type and
        site, a divergence by the rules-table row of its first differing observable, a
        new violation by its property (what a shrink keeps; `_Groups` groups by cause)."""
        out: list[tuple[str, str]] = []
        if self.crash is not None:
            out.append((self.crash.kind, self.crash.signature))
        if self.divergence is not None:
            rows = rules_involved(h, self.divergence, self.records)
            out.append((DIVERGENCE, "divergence:" + ",".join(r[1] for r in rows[:1])))
        out += [(VIOLATION, v.signature) for v in self.violations if v.new]
        return tuple(out)


#: Seconds the first run of a speculative method may take: building its config inspects
#: the drafter's model class once per process (vLLM's registry runs it in a subprocess:
#: seconds, tens of them on a loaded machine), which is not a hang of the scheduler.
FIRST_RUN_S = 300.0
_RUN_BEFORE: set[tuple[str, object]] = set()


def run_limit(kind: tuple[str, object], timeout_s: float) -> float:
    """Seconds a run of `kind` (engine, speculative method) may take: `timeout_s`, or
    FIRST_RUN_S on the first run of a speculative method in this process."""
    first = kind[1] is not None and kind not in _RUN_BEFORE
    return max(timeout_s, FIRST_RUN_S) if first and timeout_s else timeout_s


#: BATCHPROOF_AUDIT_MEMO=DIR: a folder where audits keep what they found of a run that
#: agrees with the reference, for other audits of the same batchproof sources to read
#: (`OutcomeMemo`). Unset (the default): nothing kept or read.
MEMO_ENV = "BATCHPROOF_AUDIT_MEMO"
#: The fields of a run the memo may key (vLLM's RealRun): a run with any other field is
#: never memoized, since the comparison might read it.
_MEMO_RUN_FIELDS = frozenset({"records", "sampled", "events"})


@functools.cache
def _memo_sources() -> str:
    """A digest of what an outcome of a run is a function of besides the run: the model,
    properties, manifests and methods (`proof_cache.sources_key`) and this package (the
    comparison, the classification)."""
    digest = hashlib.sha256(proof_cache.sources_key().encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class OutcomeMemo:
    """What an audit found of a real run that agrees with the reference (no divergence):
    the properties decided on its trace and their classification, kept in a folder by a
    digest of the batchproof sources, the engine, the properties asked and the run itself
    (the workload, every record, the steps that sampled and the probes' events). Those
    are a function of that digest's inputs alone, so a later audit whose engine ran the
    same workload the same way (another mutant of one release, where the mutation did not
    matter) reads them instead of deciding them again; the real engine still runs every
    workload. A run that raised an engine assertion (read by its meaning from the
    engine's source, `compare_by_meaning`), a run of another shape, and every run that
    diverges are decided anew."""

    def __init__(self, folder: Path, engine: str, props: Sequence[Property]) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.head = [_memo_sources(), engine, [_name(p) for p in props]]
        self.hits = self.misses = 0

    @classmethod
    def from_env(cls, engine: str, props: Sequence[Property]) -> OutcomeMemo | None:
        """The memo in $BATCHPROOF_AUDIT_MEMO, or None when it is unset."""
        folder = os.environ.get(MEMO_ENV)
        return cls(Path(folder), engine, props) if folder else None

    def key(self, workload: Workload, run: Any) -> str | None:
        """The digest of `run` of `workload`, or None when it is not memoized."""
        try:
            names = {f.name for f in fields(run)}
        except TypeError:
            return None
        if not names <= _MEMO_RUN_FIELDS or "records" not in names:
            return None
        records = run.records
        if any(dict(r.extra).get("assertion") is not None for r in records):
            return None
        doc = [self.head, workload_to_json(workload), [r.to_json() for r in records],
               [sorted(s) for s in getattr(run, "sampled", ())],
               [sorted(e) for e in getattr(run, "events", ())]]
        text = json.dumps(doc, sort_keys=True, default=repr)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Any:
        """What `put` kept under `key`, or None."""
        try:
            found = pickle.loads((self.folder / key).read_bytes())
        except (OSError, pickle.PickleError, EOFError, AttributeError, ImportError):
            self.misses += 1
            return None
        self.hits += 1
        return found

    def put(self, key: str, value: Any) -> None:
        """Keep `value` under `key` (written whole or not at all: audits run side by
        side)."""
        try:
            data = pickle.dumps(value)
            with tempfile.NamedTemporaryFile(dir=self.folder, delete=False) as f:
                f.write(data)
            os.replace(f.name, self.folder / key)
        except (OSError, pickle.PicklingError, TypeError, AttributeError):
            pass  # not kept: the next audit decides it again


def audit_workload(h: Harness, aw: AuditWorkload, props: Sequence[Property],
                   manifest: Manifest, timeout_s: float = 0.0,
                   memo: OutcomeMemo | None = None) -> Outcome:
    """Run `aw` on the real engine, compare it with the reference, decide `props` on
    the real trace and classify each violation (see the module doc); `memo`, when
    given, keeps (and reads back) the outcome of a run that agrees with the reference."""
    start = time.monotonic()
    kind = (h.engine, getattr(aw.workload.config, "speculative_method", None))
    limit = run_limit(kind, timeout_s)
    try:
        with deadline(limit):
            run = h.run(aw.workload)
    except InputError as exc:  # the engine refuses the workload or its config
        return Outcome(aw, skipped=" ".join(str(exc).split()),
                       engine_seconds=time.monotonic() - start)
    except Exception as exc:  # noqa: BLE001 - any failure of the real engine is a finding
        return Outcome(aw, crash=crash_of(h, exc), engine_seconds=time.monotonic() - start)
    finally:
        _RUN_BEFORE.add(kind)
    ran = time.monotonic()
    compared = run.effective(aw.workload)
    key = memo.key(aw.workload, run) if memo is not None else None
    if key is not None and (kept := memo.get(key)) is not None:  # type: ignore[union-attr]
        verdicts, violations, note = kept
        return Outcome(aw, compared, run.records, None, verdicts, violations,
                       trace_note=note, engine_seconds=ran - start,
                       batchproof_seconds=time.monotonic() - ran)
    divergence = h.compare(aw.workload, run)
    if (divergence is not None and divergence.error is not None
            and divergence.error.startswith("InputError")):
        return Outcome(aw, compared, run.records, refused=" ".join(divergence.error.split()),
                       engine_seconds=ran - start, batchproof_seconds=time.monotonic() - ran)
    note, verdicts = "", ()
    try:
        verdicts = check_trace(h.engine, compared, run.records, props, manifest)
    except TraceMismatch as exc:
        note = str(exc)
    violations = tuple(_classify(h, compared, divergence, v, props)
                       for v in verdicts if v.verdict == VIOLATED)
    if key is not None and divergence is None:
        memo.put(key, (verdicts, violations, note))  # type: ignore[union-attr]
    return Outcome(aw, compared, run.records, divergence, verdicts, violations,
                   trace_note=note, engine_seconds=ran - start,
                   batchproof_seconds=time.monotonic() - ran)


def _classify(h: Harness, compared: Workload, divergence: Any, v: TraceVerdict,
              props: Sequence[Property]) -> Violation:
    at = v.violated_at
    assert at is not None
    if divergence is None or divergence.step > at:
        shown = True  # the records agree up to the violating step
    else:
        reference = getattr(divergence, "workload", None) or compared
        shown = _reference_violates(h, reference, v, props) == at
    if v.status == "departs":
        return Violation(v, True, v.why, shown)
    if not shown:
        return Violation(v, True, f"the reference does not violate it at step {at}", shown)
    return Violation(v, False, f"{v.why}; the reference shows it at step {at}", shown)


def _reference_violates(h: Harness, compared: Workload, v: TraceVerdict,
                        props: Sequence[Property]) -> int | None:
    from model.run import simulate

    prop = next(p for p in props if (p.name, p.params) == (v.property, v.params))
    try:
        return first_violation(prop, observe(h.engine, compared, simulate(compared)))
    except Exception:  # noqa: BLE001 - a reference that fails shows nothing
        return None


# ------------------------------------------------------------------- the audit

@dataclass(frozen=True, slots=True)
class Options:
    """What `audit` runs (the CLI's flags)."""

    engine: str = "vllm-v1"
    seed: int = 0
    count: int = 100  # random workloads per mode
    steps: int = 30
    modes: tuple[str, ...] = ()  # () = every mode of the harness
    sources: tuple[str, ...] = SOURCES
    properties: tuple[str, ...] = ()  # () = every property the manifest names
    witness_timeout_s: float = 10.0
    jobs: int = 2
    cache_dir: Path | None = None
    shrink_calls: int = 400
    timeout_s: float = 20.0  # per workload, on the real engine
    time_limit_s: float = 0.0  # 0: none
    fail_fast: bool = False


@dataclass(frozen=True, slots=True)
class Finding:
    """One finding, a group of symptoms with one cause: the kind of its first symptom,
    the group's key (`signature`), the first workload that showed it and the minimal
    workload that shows it, with both runs of that workload.

    `step` is the first diverging step, the violating step or the crashing step;
    `rules` the rules-table rows involved; `text` the rendered detail (a divergence's
    side-by-side table, a crash's stack, the violating step's record); `cause` the rule
    at which the real engine and the reference part (None for a violation or crash no
    divergence explains); `count` the workloads that showed the group so far (final in
    the report) and `symptoms` how many workloads showed each of its symptoms
    ("divergence", "violation starvation k=3", "crash ...": the follow-ons folded
    under it)."""

    kind: str
    signature: str
    title: str
    first: AuditWorkload
    first_index: int
    count: int
    workload: Workload
    shrunk: bool
    original_size: tuple[int, int]  # requests, steps of the first workload
    step: int | None
    real: tuple[StepRecord, ...]
    reference: tuple[StepRecord, ...] | None
    reference_error: str
    rules: tuple[tuple[str, str, str], ...]
    text: str
    facts: Mapping[str, object] = field(default_factory=dict)
    cause: Cause | None = None
    symptoms: Mapping[str, int] = field(default_factory=dict)

    @property
    def own(self) -> str:
        """The group's first symptom ("divergence", "crash AssertionError at ...")."""
        return next(iter(self.symptoms), self.kind)

    @property
    def follow_ons(self) -> dict[str, int]:
        """The symptoms folded under the first one, by workloads showing each."""
        return {k: n for k, n in self.symptoms.items() if k != self.own}


@dataclass(frozen=True, slots=True)
class Head:
    """What an audit is about, known before its first workload: the engine, the version
    installed and where, the version the model is pinned to, the seed and the modes."""

    engine: str
    title: str
    installed: str
    location: str
    pinned: str
    seed: int
    modes: tuple[str, ...]

    @property
    def same_version(self) -> bool:
        """The installed engine is the version the model is pinned to."""
        return self.installed == self.pinned


@dataclass(frozen=True, slots=True)
class Timing:
    """Seconds spent: in the real engine (its runs), in batchproof per workload (the
    reference, the comparison and the properties), shrinking, finding witnesses,
    importing the engine, and in all."""

    engine: float
    batchproof: float
    shrink: float
    witnesses: float
    startup: float
    total: float


@dataclass(frozen=True, slots=True)
class Report(Head):
    """Everything `audit` found and how it ran: what it was about (the `Head` fields),
    then its options and results."""

    options: Options
    properties: tuple[str, ...]
    sources: Mapping[str, int]  # workloads audited per source
    audited: int
    steps: int
    skipped: tuple[tuple[str, str], ...]  # (label, why)
    expected: Mapping[str, int]  # expected violation -> workloads showing it
    findings: tuple[Finding, ...]
    witness_unknown: tuple[str, ...]
    witness_searches: int
    witnesses_cached: bool
    stopped: str  # why the audit stopped before the end of its sources, or ""
    timing: Timing
    # (label, why) of the workloads the reference refuses as input: not compared
    refused: tuple[tuple[str, str], ...] = ()
    first_finding_s: float | None = None  # seconds from the start to the first finding

    @property
    def inconclusive(self) -> bool:
        """Nothing was found but not everything was audited: the time limit stopped the
        audit, or every workload was skipped (or refused by the reference)."""
        return not self.findings and (
            self.stopped.startswith("time limit")
            or (self.audited == 0 and bool(self.skipped or self.refused)))


def release_harness(h: Harness, installed: str) -> Harness:
    """`h` for the release installed here: an older release the engine models as rule
    switches gets the harness of that release (`Harness.at_release`), so that the
    reference, the manifest and the workloads follow it; any other release (the pinned
    one, or one the model does not have) keeps `h`."""
    versions = engines.versioned(h.model)
    release = installed.split("+", 1)[0]
    if (h.at_release is None or versions is None or release == h.model.version
            or release not in versions.versions):
        return h
    return h.at_release(h, release)


def installed_version(h: Harness) -> tuple[str, str]:
    """(version, location) of the engine's package imported here."""
    module = sys.modules.get(h.package)
    version = str(getattr(module, "__version__", "") or "")
    if not version:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        try:
            version = dist_version(h.package)
        except PackageNotFoundError:
            version = "unknown"
    return version, _package_dir(h.package) or "?"


@dataclass
class _Group:
    """One group while the audit runs: its first symptom (kind, raw signature, the
    workload's index and outcome, the cause located there) and what it has gathered."""

    key: str
    kind: str
    raw: str
    index: int
    outcome: Outcome
    cause: Cause | None
    count: int = 0
    symptoms: Counter[str] = field(default_factory=Counter)
    finding: Finding | None = None


class _Groups:
    """Symptoms grouped by cause while the audit runs (see the module doc). A symptom's
    raw signature is cheap; its cause takes a second, traced run, so the cause of a raw
    signature is located on its first `CONFIRMATIONS` workloads and, when they agree, the
    later ones are grouped by the signature alone (a signature whose workloads disagree
    is located every time)."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.groups: dict[str, _Group] = {}
        self.raw: dict[str, str] = {}  # raw signature -> group key
        self.confirmed: Counter[str] = Counter()
        self.ambiguous: set[str] = set()

    def _key(self, raw: str, locate: Callable[[], Cause | None]) -> tuple[str, Cause | None]:
        if (raw in self.raw and raw not in self.ambiguous
                and self.confirmed[raw] >= CONFIRMATIONS):
            return self.raw[raw], None
        cause = locate()
        key = cause.key if cause is not None else raw
        if self.raw.setdefault(raw, key) != key:
            self.ambiguous.add(raw)
        self.confirmed[raw] += 1
        return key, cause

    def symptoms(self, outcome: Outcome) -> list[tuple[str, str, str, str, Cause | None]]:
        """(group key, kind, raw signature, label, cause) of each symptom of `outcome`."""
        h = self.h
        out: list[tuple[str, str, str, str, Cause | None]] = []
        crash, divergence = outcome.crash, outcome.divergence
        if crash is not None:
            workload = outcome.audited.workload

            def locate_crash() -> Cause | None:
                return _crash_cause(h, crash, workload)

            key, cause = self._key(crash.signature, locate_crash)
            label = ("driver error" if crash.driver else "crash") + f" {_crash_label(crash)}"
            out.append((key, crash.kind, crash.signature, label, cause))
        divergence_key = None
        if divergence is not None:
            raw = next(s for k, s in outcome.findings(h) if k == DIVERGENCE)

            def locate_divergence() -> Cause:
                found = None
                if h.locate is not None and outcome.compared is not None:
                    found = h.locate(h, outcome.compared,
                                     getattr(divergence, "workload", None) or outcome.compared,
                                     divergence.step)
                return found or observable_cause(h, divergence, outcome.records)

            divergence_key, cause = self._key(raw, locate_divergence)
            out.append((divergence_key, DIVERGENCE, raw, DIVERGENCE, cause))
        for v in outcome.violations:
            if not v.new:
                continue
            label = f"violation {v.verdict.name}"
            if v.follow_on and divergence_key is not None:
                out.append((divergence_key, VIOLATION, v.signature, label, None))
            else:
                out.append((v.signature, VIOLATION, v.signature, label, None))
        return out

    def add(self, index: int, outcome: Outcome) -> list[_Group]:
        """Group the symptoms of `outcome`; the groups it opens, in order."""
        opened = []
        for_workload: set[str] = set()
        for key, kind, raw, label, cause in self.symptoms(outcome):
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = _Group(key, kind, raw, index, outcome, cause)
                opened.append(group)
            group.symptoms[label] += 1
            if key not in for_workload:
                for_workload.add(key)
                group.count += 1
        return opened


def audit(options: Options, progress: Callable[[str], None] | None = None,
          on_start: Callable[[Head], None] | None = None,
          on_finding: Callable[[Finding], None] | None = None) -> Report:
    """Run the audit `options` describe; Unavailable when the engine does not run here.

    `progress(line)` is told what is being done (for a progress line on a terminal);
    `on_start(head)` what is audited, before the first workload; `on_finding(finding)`
    each finding as soon as its group opens and it is shrunk and described, while the
    audit goes on (its `count` and `symptoms` so far: the report has the final ones)."""
    say = progress or (lambda _line: None)
    start = time.monotonic()
    h = harness(options.engine)
    modes = options.modes or h.modes
    for mode in modes:
        if mode not in h.modes:
            raise InputError(f"unknown mode {mode!r} for {h.engine}; modes: "
                             f"{', '.join(h.modes)}")
    for source in options.sources:
        if source not in SOURCES:
            raise InputError(f"unknown source {source!r}; sources: {', '.join(SOURCES)}")
    manifest = load()
    props = properties_for(h.engine, options.properties, manifest)
    say(f"importing {h.package}")
    # The engine's start-up warnings (CPU backend, Triton, config hints) would bury the
    # audit's output; its errors still show.
    logging.getLogger(h.package).setLevel(logging.ERROR)
    if (reason := h.unavailable()) is not None:
        raise Unavailable(f"{h.model.title}'s real scheduler is not available here: {reason}")
    installed, location = installed_version(h)
    h = release_harness(h, installed)
    if options.modes and (gone := [m for m in modes if m not in h.modes]):
        raise InputError(f"mode {gone[0]} is not audited on {h.model.title} {installed}: "
                         f"the model has it for {engines.get(engines.base_name(h.engine)).version} "
                         f"only; modes: {', '.join(h.modes)}")
    modes = options.modes or h.modes
    head = Head(h.engine, h.model.title, installed, location, h.model.version, options.seed,
                tuple(modes))
    if on_start is not None:
        on_start(head)
    memo = OutcomeMemo.from_env(h.engine, props)
    startup = time.monotonic() - start
    searches = (BackgroundWitnesses(h.engine, options.witness_timeout_s, options.jobs,
                                    options.cache_dir)
                if "witnesses" in options.sources else None)

    def stream() -> Iterator[AuditWorkload]:
        # The witnesses come last: their searches (a minute or two on a cold cache) run
        # in the background meanwhile, so the first finding is not held up by them.
        order = (("random", "counterexamples") if _random_first(options)
                 else ("counterexamples", "random"))
        for source in (s for s in order if s in options.sources):
            if source == "counterexamples":
                yield from stored_counterexamples(h.engine)
            else:
                yield from random_workloads(h, modes, options.seed, options.count,
                                            options.steps)
        if searches is not None:
            say("waiting for the BMC witness searches")
            yield from searches.result().workloads

    groups = _Groups(h)
    sources: dict[str, int] = {}
    expected: dict[str, int] = {}
    skipped: list[tuple[str, str]] = []
    refused: list[tuple[str, str]] = []
    audited = steps = 0
    engine_s = batchproof_s = shrink_s = 0.0
    first_finding_s = None
    stopped = ""
    try:
        for index, aw in enumerate(stream(), start=1):
            if options.time_limit_s and time.monotonic() - start > options.time_limit_s:
                stopped = f"time limit of {options.time_limit_s:g} s reached"
                break
            say(f"{index}: {aw.label}")
            outcome = audit_workload(h, aw, props, manifest, options.timeout_s, memo)
            engine_s += outcome.engine_seconds
            batchproof_s += outcome.batchproof_seconds
            if outcome.skipped:
                skipped.append((aw.label, outcome.skipped))
                continue
            if outcome.refused:
                refused.append((aw.label, outcome.refused))
                continue
            audited += 1
            sources[aw.source] = sources.get(aw.source, 0) + 1
            steps += len(outcome.records)
            for v in outcome.violations:
                if not v.new:
                    expected[v.verdict.name] = expected.get(v.verdict.name, 0) + 1
            located = time.monotonic()
            opened = groups.add(index, outcome)
            batchproof_s += time.monotonic() - located
            for group in opened:
                say(f"shrinking {group.kind} ({group.key})")
                began = time.monotonic()
                group.finding = _finding(h, group, props, manifest, options)
                shrink_s += time.monotonic() - began
                if first_finding_s is None:
                    first_finding_s = time.monotonic() - start
                if on_finding is not None:
                    on_finding(group.finding)
            if opened and options.fail_fast:
                stopped = f"--fail-fast: a finding on workload {index}"
                break
    finally:  # the searches an early stop (or an error) leaves are not waited for
        found_witnesses = (searches.cancel() if searches is not None
                           else Witnesses((), (), 0, 0.0, False))
    findings = tuple(replace(g.finding, count=g.count, symptoms=dict(g.symptoms))
                     for g in groups.groups.values() if g.finding is not None)
    return Report(
        engine=h.engine, title=h.model.title, installed=installed, location=location,
        pinned=h.model.version, seed=options.seed, options=options, modes=tuple(modes),
        properties=tuple(" ".join([p.name, *(f"{k}={v}" for k, v in p.params)])
                         for p in props),
        sources=sources, audited=audited, steps=steps, skipped=tuple(skipped),
        expected=dict(sorted(expected.items())), findings=findings,
        witness_unknown=found_witnesses.unknown,
        witness_searches=found_witnesses.searches,
        witnesses_cached=found_witnesses.cached, stopped=stopped,
        timing=Timing(engine_s, batchproof_s, shrink_s, found_witnesses.seconds, startup,
                      time.monotonic() - start),
        refused=tuple(refused), first_finding_s=first_finding_s)


def _random_first(options: Options) -> bool:
    """Whether the random workloads come before the stored counterexamples (`random`
    listed before `counterexamples`; the default lists them the other way)."""
    order = [s for s in options.sources if s in ("counterexamples", "random")]
    return order[:1] == ["random"]


def _crash_label(crash: Crash) -> str:
    """`AssertionError at vllm/v1/core/sched/scheduler.py:1413 in schedule`."""
    if crash.timeout:
        return f"timeout at {crash.where}"
    return f"{crash.error.split(':', 1)[0]} at {crash.where}"


# ----------------------------------------------------------------- shrinking

def _shows(h: Harness, kind: str, sig: str, props: Sequence[Property], manifest: Manifest,
           timeout_s: float, cause: str | None = None) -> Callable[[Workload], bool]:
    """The predicate a shrink keeps true: the workload still shows the symptom `sig` of
    `kind` (and, given `cause`, the same cause)."""
    wanted = [p for p in props if f"violation:{_name(p)}" == sig] if kind == VIOLATION else []

    def fails(w: Workload) -> bool:
        outcome = audit_workload(h, AuditWorkload(w, "shrink", "shrink"), wanted, manifest,
                                 timeout_s)
        if outcome.skipped or outcome.refused:
            return False
        if not any(s == sig for _, s in outcome.findings(h)):
            return False
        if cause is None:
            return True
        found = _cause_of(h, kind, outcome)
        return found is not None and found.key == cause

    return fails


def _crash_cause(h: Harness, crash: Crash, workload: Workload) -> Cause | None:
    """The cause of a crash when its run parted from the reference before it raised (a
    step before, another way in the same step, another value): None when the real path
    only ends where it raised, and the crash's own site is its cause."""
    if crash.timeout or h.locate is None:
        return None
    step = crash.step if crash.step is not None else len(crash.records) + 1
    cause = h.locate(h, workload, workload, step)
    if cause is not None and cause.real_stops and cause.step == step:
        return None
    return cause


def _cause_of(h: Harness, kind: str, outcome: Outcome) -> Cause | None:
    """The cause of the symptom of `kind` on `outcome` (see `_Groups`)."""
    if kind in (CRASH, DRIVER_ERROR) and outcome.crash is not None:
        return _crash_cause(h, outcome.crash, outcome.audited.workload)
    divergence = outcome.divergence
    if kind != DIVERGENCE or divergence is None or outcome.compared is None:
        return None
    found = None
    if h.locate is not None:
        found = h.locate(h, outcome.compared,
                         getattr(divergence, "workload", None) or outcome.compared,
                         divergence.step)
    return found or observable_cause(h, divergence, outcome.records)


def _name(p: Property) -> str:
    return " ".join([p.name, *(f"{k}={v}" for k, v in p.params)])


def _finding(h: Harness, group: _Group, props: Sequence[Property], manifest: Manifest,
             options: Options) -> Finding:
    """The finding of `group`, its first symptom's workload shrunk (keeping the symptom
    and, when the group has a cause, the cause) and described."""
    kind, sig, first = group.kind, group.raw, group.outcome
    original = first.compared or first.audited.workload
    minimal, shrunk = original, False
    wanted = [p for p in props if f"violation:{_name(p)}" == sig] if kind == VIOLATION else []

    def run(w: Workload) -> Outcome:
        return audit_workload(h, AuditWorkload(w, "shrink", "minimal"), wanted, manifest,
                              options.timeout_s)

    def keeps(outcome: Outcome) -> tuple[bool, Cause | None]:
        """(it shows the symptom for the group's cause, that cause as located there)."""
        if not any(s == sig for _, s in outcome.findings(h)):
            return False, None
        if group.cause is None:
            return True, None
        cause = _cause_of(h, kind, outcome)
        return cause is not None and cause.key == group.key, cause

    outcome = first
    if options.shrink_calls > 0:
        minimal = tidy(h.shrink(original, _shows(h, kind, sig, props, manifest,
                                                 options.timeout_s), options.shrink_calls))
        outcome = run(minimal)
        if not keeps(outcome)[0] and group.cause is not None:
            # the smaller workload shows the symptom for another cause: shrink again,
            # keeping the cause too, on a smaller budget
            minimal = tidy(h.shrink(original, _shows(h, kind, sig, props, manifest,
                                                     options.timeout_s, cause=group.key),
                                    max(1, options.shrink_calls // 4)))
            outcome = run(minimal)
        shrunk = minimal != original
    kept, cause = keeps(outcome)
    if not kept:  # flaky, or another cause: keep the first workload
        minimal, shrunk, outcome, cause = original, False, first, None
    cause = cause or group.cause
    workload = outcome.compared or minimal
    title, step, real, rules, text, facts = _describe(h, kind, sig, outcome)
    if cause is not None:
        rules = cause.rows or rules
        title = _cause_title(cause, kind, title)
    divergence = outcome.divergence
    reference_workload = (getattr(divergence, "workload", None) if divergence is not None
                          else None) or workload
    reference, reference_error = _reference_run(reference_workload)
    return Finding(kind=kind, signature=group.key, title=title, first=first.audited,
                   first_index=group.index, count=group.count, workload=workload,
                   shrunk=shrunk, original_size=(len(first.audited.workload.requests),
                                                 first.audited.workload.steps),
                   step=step, real=real, reference=reference,
                   reference_error=reference_error, rules=rules, text=text, facts=facts,
                   cause=cause, symptoms=dict(group.symptoms))


def _cause_title(cause: Cause, kind: str, symptom: str) -> str:
    """A group's title: where the two part (the first symptom too, unless a divergence
    located by its path)."""
    if cause.how == "observable":
        return f"{symptom} (rule: {cause.function}, {cause.span})"
    what = ("the real engine and the reference take different ways at" if cause.how == "flow"
            else "the real engine ran a changed statement at" if cause.how == "changed"
            else f"another {cause.how} at")  # a value parting
    return f"{what} {cause.headline}" + ("" if kind == DIVERGENCE else f": {symptom}")


def _describe(h: Harness, kind: str, sig: str, outcome: Outcome
              ) -> tuple[str, int | None, tuple[StepRecord, ...],
                         tuple[tuple[str, str, str], ...], str, dict[str, object]]:
    """(title, step, real records, rules rows, text, facts) of a finding on `outcome`."""
    if kind in (CRASH, DRIVER_ERROR):
        crash = outcome.crash
        assert crash is not None
        text = "\n".join([crash.summary, *(f"  {f}" for f in crash.stack)])
        return (crash.summary, crash.step, crash.records, _crash_rules(h, crash), text,
                {"error": crash.error, "where": crash.where, "stack": list(crash.stack),
                 "timeout": crash.timeout, "driver": crash.driver,
                 "site": str(crash.site) if crash.site is not None else None})
    if kind == DIVERGENCE:
        div = outcome.divergence
        facts = {"fields": list(div.fields), "error": div.error,
                 "real": div.real.to_json() if div.real is not None else None,
                 "reference": div.reference.to_json() if div.reference is not None else None,
                 "differences": {f: [value_text(f, div.real), value_text(f, div.reference)]
                                 for f in div.fields}}
        return (_divergence_title(div), div.step, outcome.records,
                rules_involved(h, div, outcome.records), div.render(), facts)
    violation = next(v for v in outcome.violations if v.signature == sig)
    verdict = violation.verdict
    at = verdict.violated_at
    record = outcome.records[at - 1] if at is not None and at <= len(outcome.records) else None
    prop = catalogue.get(verdict.property, **dict(verdict.params))
    text = (f"{verdict.name} violated at step {at} on the real trace: "
            f"{' '.join(prop.description.split())}\nwhy new: {violation.why}\n"
            f"the real record of step {at}: {json.dumps(record.to_json()) if record else '-'}")
    # The premises the expectation rests on are the text's; the title names the entries.
    short = (f"the manifest expects it to hold on configs like this one: its entries for "
             f"{', '.join(verdict.expected_on)}" if verdict.status == "departs"
             else violation.why)
    return (f"{verdict.name} violated at step {at} ({short})", at, outcome.records,
            (), text, {"property": verdict.property, "params": dict(verdict.params),
                       "expected": verdict.expected, "why": violation.why,
                       "manifest": verdict.why, "expected_on": list(verdict.expected_on)})


def _divergence_title(div: Any) -> str:
    """`step 4: scheduled real r6:11, reference r6:11 r7:1 (and 7 more fields)`."""
    if div.error is not None:
        return div.summary()
    first = next((f for g in _CAUSE_ORDER for f in div.fields if f in g), div.fields[0])
    more = len(div.fields) - 1
    return (f"step {div.step}: {first} real {value_text(first, div.real)}, reference "
            f"{value_text(first, div.reference)}"
            + (f" (and {more} more field{'s' if more > 1 else ''})" if more else ""))


def _crash_rules(h: Harness, crash: Crash) -> tuple[tuple[str, str, str], ...]:
    """The rules-table rows whose upstream lines hold a frame of the crash's stack."""
    rows = []
    for frame in reversed(crash.stack):
        path, _, rest = frame.partition(":")
        line = int(rest.split()[0]) if rest.split() and rest.split()[0].isdigit() else -1
        rel = path.removeprefix(f"{h.package}/")
        for row in h.model.rules_table:
            cited, _, span = row[0].split()[0].partition(":")
            lo, _, hi = span.partition("-")
            if (cited.endswith(rel) and lo.isdigit()
                    and int(lo) <= line <= int(hi or lo)):
                rows.append(row)
    narrow = sorted(dict.fromkeys(rows), key=lambda r: _span_len(r[0]))
    return tuple(narrow[:2])


def _span_len(citation: str) -> int:
    _, _, span = citation.split()[0].partition(":")
    lo, _, hi = span.partition("-")
    return int(hi or lo) - int(lo) if lo.isdigit() else 1 << 30


def _reference_run(workload: Workload) -> tuple[tuple[StepRecord, ...] | None, str]:
    """The reference's records of `workload`, or None and why not."""
    from model.run import simulate

    try:
        return simulate(workload), ""
    except Exception as exc:  # noqa: BLE001 - the reference failing is shown, not raised
        return None, f"{type(exc).__name__}: {exc}"


def exit_code(report: Report) -> int:
    """0 clean, 1 a finding, 3 inconclusive (see `Report.inconclusive`)."""
    if report.findings:
        return 1
    return 3 if report.inconclusive else 0


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m checker.conformance.audit --write-witnesses`: search every witness of the
    engine (no cache) and write the shipped file audit reads on a cold cache."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--write-witnesses", action="store_true", required=True)
    ap.add_argument("--engine", default="vllm-v1")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per search")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    path = write_shipped_witnesses(args.engine, args.timeout, args.jobs)
    doc = json.loads(path.read_text())
    counts = Counter(r["status"] for r in doc["results"])
    print(f"wrote {path}: {len(doc['results'])} searches, {dict(counts)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

