"""The traced request being answered: its span, for the layers below the transport to add to.

A transport that traces sets :data:`CURRENT` for the time it answers a request (only when
tracing is on: otherwise nothing sets it). The request ledger of a traced server adds the model
version and how the cache answered (``service.traced_ledger``), the scheduler each model
execution it ran for the request (:func:`note_execution`), an upstream call a span of its own
under it (``upstream_spans``); the transport ends the span with what it sent. Nothing is passed
down the request path: the context variable carries it, as OpenTelemetry's own context does.

A batch of the dynamic batcher runs in a task of its own, which belongs to no request: there
:data:`BATCH` holds the traced requests the batch serves (:func:`serving_batch`), and
:func:`served` reads either.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass, field

from opentelemetry.trace import Span, Tracer


@dataclass(slots=True)
class TracedRequest:
    """One request's span and what the layers below noted for it."""

    span: Span
    #: The tracer of ``span``, for the spans of its own that the request causes below it.
    tracer: Tracer
    #: How the cache answered, as the ledger saw it (None: it did not see the request).
    cache_result: str | None = None
    #: (queue, compute) nanoseconds of each model execution run for the request.
    executions: list[tuple[int, int]] = field(default_factory=list)

    def take_executions(self) -> tuple[int, int] | None:
        """The summed queue and compute times noted so far (None: none), forgotten: the next
        request of a gRPC stream starts afresh."""
        if not self.executions:
            return None
        queue_ns = sum(queue for queue, _ in self.executions)
        compute_ns = sum(compute for _, compute in self.executions)
        self.executions.clear()
        return queue_ns, compute_ns

    def take_cache_result(self) -> str | None:
        """What the ledger noted of the cache, forgotten (as :meth:`take_executions`)."""
        result, self.cache_result = self.cache_result, None
        return result


CURRENT: ContextVar[TracedRequest | None] = ContextVar("cachefleet_traced_request", default=None)
#: The traced requests of the batch whose task this is (empty elsewhere).
BATCH: ContextVar[tuple[TracedRequest, ...]] = ContextVar("cachefleet_traced_batch", default=())


def serving_batch(requests: Iterable[TracedRequest | None]) -> None:
    """Say, in a batch's own task, which traced requests it serves (the untraced are None)."""
    BATCH.set(tuple(request for request in requests if request is not None))


def served() -> tuple[TracedRequest, ...]:
    """The traced requests the work running now is for: the current request, or a batch's
    requests (oldest first); empty when nothing is traced."""
    traced = CURRENT.get()
    return (traced,) if traced is not None else BATCH.get()


def note_execution(queue_ns: int, compute_ns: int) -> None:
    """A model execution run for the current request (a no-op outside a traced request)."""
    traced = CURRENT.get()
    if traced is not None:
        traced.executions.append((queue_ns, compute_ns))
