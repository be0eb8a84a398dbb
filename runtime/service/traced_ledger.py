"""The request ledger of a server that traces: each passage written down, then told to the span.

Chosen instead of :class:`RequestLedger` by the composition root when tracing is on, so a server
that does not trace runs the plain ledger and pays nothing. When a request's passage closes, the
span its transport started (``cachefleet.runtime.tracing.current``) gets the model version that
answered and how the cache answered; the transport ends the span. A memo hit, written down
without a passage (``RequestLedger.memo_hit``), tells the span the same, on whichever thread
answered it: so a traced memo hit names its model and version as any other answer does (gRPC's
``ModelInfer`` span starts before its request is parsed, and knows neither until here).
"""

from __future__ import annotations

from collections.abc import Callable

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service.request_ledger import Entry, Passage, RequestLedger
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT


class TracedLedger(RequestLedger):
    """A :class:`RequestLedger` that also annotates the current request's span."""

    def succeeded(self, passage: Passage) -> int:
        closed_ns = super().succeeded(passage)
        _annotate(passage.model, passage.cache_status)
        return closed_ns

    def failed(self, passage: Passage, error: ServingError) -> None:
        super().failed(passage, error)
        _annotate(passage.model, passage.cache_status)

    def memo_hit(
        self,
        model: Model,
        transport: str,
        started_ns: int,
        confirm: Callable[[Entry, int], int | None],
        entry: Entry,
        status: CacheStatus,
    ) -> bool:
        if not super().memo_hit(model, transport, started_ns, confirm, entry, status):
            return False  # stale: the service's path answers it, and annotates it then
        _annotate(model, status)
        return True


def _annotate(model: Model, cache_status: CacheStatus | None) -> None:
    traced = CURRENT.get()
    if traced is None:  # a request no transport traced (e.g. the app without its front)
        return
    traced.span.set_attributes({names.MODEL_NAME: model.name, names.MODEL_VERSION: model.version})
    if cache_status is not None:
        traced.cache_result = cache_status.value
