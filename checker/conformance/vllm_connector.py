"""The conformance harness's own KV connector for vLLM's real `Scheduler` (v0.32.0): a
`KVConnectorBase_V1` whose scheduler-side answers come from the workload, as the harness
already feeds sampled tokens and drafts.

vLLM builds it itself: the harness's VllmConfig carries a KVTransferConfig naming this
class and module (`kv_connector="HarnessConnector"`, `kv_connector_module_path`), which
`KVConnectorFactory.get_connector_class` imports (distributed/kv_transfer/kv_connector/
factory.py:96-120); the Scheduler creates it with the scheduler role (S:164-194). The
driver then gives it the workload's external hits (`answer_with`). It answers
`get_num_new_matched_tokens` with what the external store holds beyond the tokens the
scheduler shows it, asynchronously when the workload says so (the same rule as the
reference's model/vllm/connector.py, written here against vLLM's Request). It frees every
finished request's blocks at once (`request_finished` -> False, the base class's answer)
and has no worker side: the driver itself puts the load reports in the model output
(`KVConnectorOutput.finished_recving` / `failed_recving`).

This module imports vLLM at import time: only vLLM's factory imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)

from model.core.types import ExternalHit

CONNECTOR_NAME = "HarnessConnector"


class HarnessConnector(KVConnectorBase_V1):
    """A scheduler-side connector answering from the workload (see the module doc)."""

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.hits: dict[str, ExternalHit] = {}
        self.calls: list[tuple[str, int, int, bool]] = []  # (id, shown, answered, async)

    def answer_with(self, hits: Iterable[ExternalHit]) -> None:
        """The external hits to answer with, one per request at most."""
        self.hits = {h.id: h for h in hits}

    # ---- scheduler side ----------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        """The hit's tokens beyond `num_computed_tokens`; async only when there are some
        (base.py:521-523)."""
        hit = self.hits.get(request.request_id)
        tokens = 0 if hit is None else max(0, hit.tokens - num_computed_tokens)
        load_async = hit is not None and hit.load_async and tokens > 0
        self.calls.append((request.request_id, num_computed_tokens, tokens, load_async))
        return tokens, load_async

    def update_state_after_alloc(self, request: Any, blocks: Any,
                                 num_external_tokens: int) -> None:
        """Nothing to remember: no worker runs the loads."""

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        """Empty metadata: no worker reads it."""
        return KVConnectorMetadata()

    # ---- worker side (never run: the harness has no worker) ----------------------------

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        """Unused."""

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Unused."""

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        """Unused."""

    def wait_for_save(self) -> None:
        """Unused."""
