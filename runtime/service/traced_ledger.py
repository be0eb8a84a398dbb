"""The request ledger of a server that traces: each passage written down, then told to the span.

Chosen instead of :class:`RequestLedger` by the composition root when tracing is on, so a server
that does not trace runs the plain ledger and pays nothing. When a request's passage closes, the
span its transport started (``cachefleet.runtime.tracing.current``) gets the model version that
answered and how the cache answered; the transport ends the span.
"""

from __future__ import annotations

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.service.request_ledger import Passage, RequestLedger
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT


class TracedLedger(RequestLedger):
    """A :class:`RequestLedger` that also annotates the current request's span."""

    def succeeded(self, passage: Passage) -> int:
        closed_ns = super().succeeded(passage)
        _annotate(passage)
        return closed_ns

    def failed(self, passage: Passage, error: ServingError) -> None:
        super().failed(passage, error)
        _annotate(passage)


def _annotate(passage: Passage) -> None:
    traced = CURRENT.get()
    if traced is None:  # a request no transport traced (e.g. the app without its front)
        return
    model = passage.model
    traced.span.set_attributes({names.MODEL_NAME: model.name, names.MODEL_VERSION: model.version})
    if passage.cache_status is not None:
        traced.cache_result = passage.cache_status.value
