"""`--kv-transfer-config` in `batchproof config`: the JSON parsed as vLLM parses it, what
the model covers of the connector it names, and the connector hazard decided on the
reference (model/vllm/connector.py).

vLLM reads the flag into KVTransferConfig (config/kv_transfer.py:55-125): `kv_connector`
(a name, or None for no connector), `kv_role` (kv_producer, kv_consumer or kv_both, required
when a connector is named, 110-125) and `kv_load_failure_policy` ("fail" by default, or
"recompute", 88); its other fields (ports, buffers, engine id, extra config) shape the
worker side only. The Scheduler builds a scheduler-side connector whenever the config is
given (v1/core/sched/scheduler.py:171-194).

What the model covers. Its connector environment (model/vllm/connector.py) is every
answer `get_num_new_matched_tokens` can give that is not None, loaded in the step or
asynchronously, and every step a load can end in, failed or not, under either
kv_load_failure_policy (a failure reported per request, failed_recving); the scheduler's
side of it is conformance-tested against vLLM's real Scheduler (modes `connector`,
`connector+prefix`). It leaves out:
- a producer role (kv_producer, kv_both): a producer's connector may hold a finished
  request's blocks until its KV is sent (`request_finished` -> True,
  scheduler.py:2723, 2740-2742, freed on finished_sending, 3231-3235);
- failures a connector reports as block ids (invalid_block_ids, S:2062-2069, 3356-3450),
  which no answer of `batchproof config` depends on here;
- speculative decoding and hybrid KV cache groups beside a connector (prefix caching and
  the AsyncScheduler, whose consumer connector defers block frees, S:186-191, are
  modelled: conformance modes `connector+prefix`, `connector+async`).
A hazard it decides for a deployment with one of those on is UNKNOWN with the reason,
unless the witness does not touch it (said in its detail).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from checker.config.hazards import UNKNOWN_LABEL, WITNESSED, HazardResult, Witness
from checker.methods.replay import ReplayResult
from model.core.errors import InputError, shown
from model.core.types import ExternalHit, RequestSpec, StepRecord, Workload
from model.vllm.config import Config
from model.vllm.deployment import Deployment
from model.vllm.reference import simulate
from properties.connector import waits_behind_loads

ROLES = ("kv_producer", "kv_consumer", "kv_both")
POLICIES = ("fail", "recompute")
# KVTransferConfig's fields (config/kv_transfer.py:55-100); only the first three steer the
# scheduler.
_FIELDS = ("kv_connector", "kv_role", "kv_load_failure_policy", "engine_id",
           "kv_buffer_device", "kv_port", "kv_connector_extra_config",
           "kv_connector_module_path", "enable_permute_local_kv")
FIX = ('give a JSON object such as \'{"kv_connector": "NixlConnector", "kv_role": '
       '"kv_consumer"}\' (vLLM\'s KVTransferConfig fields)')


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """The scheduler's part of a KVTransferConfig."""

    kv_connector: str | None
    kv_role: str | None
    kv_load_failure_policy: str = "fail"

    @property
    def producer(self) -> bool:
        """`is_kv_producer` (config/kv_transfer.py:130-132)."""
        return self.kv_connector is not None and self.kv_role in ("kv_producer", "kv_both")

    def outside(self) -> str | None:
        """Why the model does not cover this connector's scheduler side, or None."""
        if self.kv_connector is None:
            return None
        if self.producer:
            return (f"kv_role {self.kv_role}: a producer's connector may keep a finished "
                    "request's blocks until its KV is sent (request_finished -> True, "
                    "v1/core/sched/scheduler.py:2723, 2740-2742), which the model does not cover")
        return None

    def describe(self) -> str:
        """One line for the report."""
        if self.kv_connector is None:
            return "no connector named (kv_connector null): the scheduler runs none"
        covered = self.outside()
        return (f"{self.kv_connector}, kv_role {self.kv_role}, kv_load_failure_policy "
                f"{self.kv_load_failure_policy}: "
                + ("modelled (the scheduler's side: external hits, sync and async loads, "
                   "load failures per request; model/vllm/connector.py)" if covered is None
                   else "outside the model (" + covered + ")"))


def parse_kv_transfer(text: str) -> KvTransfer:
    """The flag's JSON as vLLM reads it (KVTransferConfig, config/kv_transfer.py:110-125);
    a one-line InputError naming the bad value and the fix."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"--kv-transfer-config is not valid JSON ({exc.msg} at column "
                         f"{exc.colno}); {FIX}") from None
    if not isinstance(doc, dict):
        raise InputError(f"--kv-transfer-config must be a JSON object, got {shown(doc)}; {FIX}")
    unknown = sorted(set(doc) - set(_FIELDS))
    if unknown:
        raise InputError(f"--kv-transfer-config: unknown field {unknown[0]!r} (vLLM's "
                         f"KVTransferConfig has {', '.join(_FIELDS)}); {FIX}")
    connector, role = doc.get("kv_connector"), doc.get("kv_role")
    policy = doc.get("kv_load_failure_policy", "fail")
    if connector is not None and (not isinstance(connector, str) or not connector):
        raise InputError(f"--kv-transfer-config: kv_connector must be a connector name, got "
                         f"{shown(connector)}; {FIX}")
    if role is not None and role not in ROLES:
        raise InputError(f"--kv-transfer-config: unsupported kv_role {shown(role)}; vLLM "
                         f"supports {', '.join(ROLES)} (config/kv_transfer.py:114-118)")
    if connector is not None and role is None:
        raise InputError("--kv-transfer-config: kv_role is required when kv_connector is set "
                         f"(config/kv_transfer.py:120-124); give one of {', '.join(ROLES)}")
    if policy not in POLICIES:
        raise InputError(f"--kv-transfer-config: kv_load_failure_policy must be 'fail' or "
                         f"'recompute', got {shown(policy)} (config/kv_transfer.py:88)")
    return KvTransfer(connector, role, policy)


# --- the connector hazard ------------------------------------------------------------------

HAZARD = "kv_load_blocks_admission"
TITLE = ("a request that fits the pool alone waits K steps, unscheduled, while requests "
         "waiting for their asynchronous KV loads hold the blocks")
_UPSTREAM = ("an async load allocates its blocks at once and holds them while it waits "
             "(v1/core/sched/scheduler.py:1221-1282, 1320-1341); such requests are not "
             "running, so max_num_seqs does not bound them (922-924), and a later request "
             "that needs blocks waits at the head of the queue (1275-1282)")


def loaders_workload(cfg: Config, steps: int, loaders: int, late_prompt: int) -> Workload:
    """A constructed run: `loaders` async loads of the longest prompt (max_model_len - 1
    tokens, their whole prompt a hit), the last one cut to what the usable pool has left,
    arriving in step 1 and never reported, then one request of `late_prompt` tokens. With
    nothing running no watermark applies (kv_cache_manager.py:509-516), and a load of its
    whole prompt leaves nothing to reserve (scheduler.py:3088-3092), so each load's
    admission needs exactly its blocks."""
    bs = cfg.block_size
    most = -(-(cfg.max_model_len - 1) // bs)  # blocks of the longest prompt
    left = cfg.usable_blocks
    requests, hits = [], []
    for i in range(loaders):
        blocks = min(most, left)
        if blocks == 0:
            break
        tokens = min(blocks * bs, cfg.max_model_len - 1)
        requests.append(RequestSpec(id=f"load{i}", prompt_len=tokens, max_tokens=1))
        hits.append(ExternalHit(id=f"load{i}", tokens=tokens, load_async=True))
        left -= blocks
    requests.append(RequestSpec(id="late", prompt_len=late_prompt, max_tokens=1))
    return Workload(config=replace(cfg, kv_connector=True), requests=tuple(requests),
                    steps=steps, kv_hits=tuple(hits))


def minimal_witness(cfg: Config, steps: int) -> tuple[Workload, tuple[StepRecord, ...],
                                                        int] | None:
    """The run with the fewest requests that shows the hazard within `steps` steps, among
    the constructed ones: fewer than ceil((usable - most + 1) / most) loads leave at least
    `most` blocks free, as many as any request's admission asks with nothing running, so
    the search starts there; a late request of the longest prompt is tried first, then
    one of 1 token (its admission asks for one block)."""
    most = -(-(cfg.max_model_len - 1) // cfg.block_size)
    usable = cfg.usable_blocks
    start = max(1, -(-(usable - most + 1) // most))
    for loaders in range(start, -(-usable // most) + 1):
        for late in (cfg.max_model_len - 1, 1):
            workload = loaders_workload(cfg, steps, loaders, late)
            records = simulate(workload)
            at = waits_behind_loads(workload, records, steps)
            if at is not None:
                return workload, records, at
    return None


def decide_connector_hazard(cfg: Config, kv: KvTransfer, deployment: Deployment,
                            pool_known: bool, steps: int) -> HazardResult:
    """The connector hazard for this deployment: WITNESSED by the constructed run replayed
    on the reference (with the deployment's own switches argued where the reference cannot
    run them), or UNKNOWN with the reason."""
    why = kv.outside()
    if why is not None:
        return HazardResult(HAZARD, TITLE, UNKNOWN_LABEL, "outside the model: " + why)
    if not pool_known:
        return HazardResult(HAZARD, TITLE, UNKNOWN_LABEL, "needs the KV pool size: give "
                            "--num-gpu-blocks-override N (vLLM logs it at startup)")
    others = [f.name for f in deployment.outside_model() if f.name != "KV connector"]
    if cfg.num_spec_tokens or others:
        return HazardResult(HAZARD, TITLE, UNKNOWN_LABEL, "outside the model: KV connector "
                            "beside " + ", ".join(others or ["speculative decoding"]))
    plain = replace(cfg, enable_prefix_caching=deployment.prefix_caching,
                    async_scheduling=deployment.async_scheduling,
                    kv_load_failure_policy=kv.kv_load_failure_policy)
    found = minimal_witness(plain, steps)
    if found is None:
        return HazardResult(HAZARD, TITLE, UNKNOWN_LABEL, "the constructed runs on the "
                            "reference did not show it")
    workload, records, at = found
    loaders = len(workload.requests) - 1
    late = workload.requests[-1].prompt_len
    detail = (f"{_UPSTREAM}: {loaders} async load(s) of the {cfg.usable_blocks} usable "
              f"blocks, never reported, and a request of {late} token(s) that waits "
              f"{steps} steps; checked on the reference ("
              f"{'AsyncScheduler' if plain.async_scheduling else 'synchronous Scheduler'}, "
              f"prefix caching {'on' if plain.enable_prefix_caching else 'off'}); minimal in "
              "requests and steps among such runs (fewer loads "
              "leave a request of any length room), lengths not minimised; it lasts as long "
              "as the loads do: VIOLATED for a connector that may never end a load, not "
              "decided under a premise that every load ends within K steps")
    return HazardResult(HAZARD, TITLE, WITNESSED, detail, (("steps", steps),),
                        Witness(workload, ReplayResult(tuple(records), at), at, False,
                                first_shown=1))


def witness_records(result: HazardResult) -> tuple[StepRecord, ...]:
    """The records a connector witness shows."""
    return () if result.witness is None else result.witness.shown()
