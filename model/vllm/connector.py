"""The KV connector beside vLLM V1's reference scheduler (v0.32.0): what the environment
chooses and what the scheduler keeps about it.

vLLM runs a scheduler-side connector when `--kv-transfer-config` names one
(S:164-194; config/kv_transfer.py). In the waiting loop the scheduler asks it, for a request
with nothing computed, how many tokens beyond the local prefix hit it can load and
whether the load is asynchronous (`get_num_new_matched_tokens`, S:970-1042; the contract
is D:501-532). A synchronous hit is admitted with its tokens counted as computed, the load
happening inside the step; an asynchronous one gets its blocks allocated with nothing to
compute (S:1109-1112, 1221-1282), turns WAITING_FOR_REMOTE_KVS and is set aside
(S:1320-1341) until the worker reports the load finished in a later step's output
(`finished_recving`, S:2329-2330, 3209-3235); the next time it heads the waiting loop it
is promoted back to WAITING (or PREEMPTED) and, when the load covered every token, kept
one short so that a token is left to compute (S:3123-3173, 3175-3193). A failed load is
reported as failed_recving together with finished_recving (the worker's output aggregator
reports a failure only with its finish, distributed/kv_transfer/kv_connector/utils.py:
169-172); under the default kv_load_failure_policy "fail" (config/kv_transfer.py:88,
S:183-184) the request ends with FINISHED_ERROR (S:2058-2061, 2306-2325, 3341-3354); under
"recompute" its computed tokens drop to 0 (S:3341-3354) and, when the waiting loop takes
it up, its blocks are freed and it starts again from its prefix lookup and the connector's
answer (S:3123-3147, 3175-3193). Failures are per request (failed_recving); a connector's
block-level invalid_block_ids (S:2062-2069, 3356-3450) are outside the model.

The environment, chosen by the workload: for each request the prompt tokens the external
store holds and whether loading them is asynchronous (`ExternalHit`), and the step of each
load report (`KVLoadEvent`). The connector answers with what the store holds beyond the
locally computed tokens; its answer is never None (the "ask again later" answer of
S:983-988 is outside the model). A connector that delays the free of finished requests'
blocks (a producer's send, `request_finished` returning True, S:2723, 2740-2742) is outside the
model too: the modelled connector frees at once.

Citations: S = v1/core/sched/scheduler.py, D = distributed/kv_transfer/kv_connector/v1/
base.py, paths relative to `vllm/`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field

from model.core.types import ExternalHit, KVLoadEvent


@dataclass(slots=True)
class Connector:
    """The connector's answers (from the workload) and the state of its loads.

    `loading`: requests whose asynchronous load the worker runs and has not reported yet
    (the worker's side). `finished_recving`: S:247, loads reported finished whose request
    the waiting loop has not promoted yet (the scheduler's side)."""

    hits: dict[str, ExternalHit] = field(default_factory=dict)
    loading: set[str] = field(default_factory=set)
    finished_recving: set[str] = field(default_factory=set)
    # S:248: under the policy "recompute", failed loads not yet taken up.
    failed_recving: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, hits: Iterable[ExternalHit]) -> Connector:
        """A connector answering with `hits` (one per request at most)."""
        return cls(hits={h.id: h for h in hits})

    def __deepcopy__(self, memo: dict[int, object]) -> Connector:
        """The answers (frozen) in a dict of the copy's own, the load sets copied."""
        return Connector(dict(self.hits), set(self.loading), set(self.finished_recving),
                         set(self.failed_recving))

    def num_new_matched_tokens(self, request_id: str, num_computed_tokens: int
                               ) -> tuple[int, bool]:
        """`get_num_new_matched_tokens(request, num_computed_tokens)` (D:501-532): the
        tokens of the external hit beyond `num_computed_tokens`, and whether they load
        asynchronously (False when there is nothing to load, as D:521-523 requires)."""
        hit = self.hits.get(request_id)
        if hit is None:
            return 0, False
        tokens = max(0, hit.tokens - num_computed_tokens)
        return tokens, hit.load_async and tokens > 0

    def reports(self, events: Iterable[KVLoadEvent]) -> tuple[KVLoadEvent, ...]:
        """The step's load reports that the worker can make: one per request whose load is
        in flight, the first the workload lists (a report for a request with no load in
        flight does nothing)."""
        seen: set[str] = set()
        out = []
        for event in events:
            if event.id in self.loading and event.id not in seen:
                seen.add(event.id)
                out.append(event)
        return tuple(out)


def copied(connector: Connector | None) -> Connector | None:
    """A copy sharing nothing mutable, or None."""
    return None if connector is None else copy.deepcopy(connector)
