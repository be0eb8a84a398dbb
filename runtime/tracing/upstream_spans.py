"""The span of a call to the upstream (upstream mode), and the trace context it forwards.

A forwarded miss is a ``CLIENT`` span of its own, a child of the request span it serves
(:func:`~cachefleet.runtime.tracing.current.served`), started in the model thread that makes the
call and ended when the answer (or the error) is back. Its ``traceparent`` goes to the upstream
with the call, so the upstream's own span (Triton's, another cachefleet's) is a child of it and
joins the caller's trace. A batch of the dynamic batcher is one call for several requests: its
span is a child of the oldest and links to the others (OpenTelemetry's way of one operation for
several traces); the upstream joins the oldest's trace.

When nothing is traced (tracing off, or a call no request caused: the repository refresh) no span
is made and nothing is forwarded: :func:`upstream_call` yields None, at the cost of reading two
context variables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import served
from cachefleet.runtime.tracing.propagation import headers_of


@dataclass(frozen=True, slots=True)
class UpstreamCall:
    """The span of one upstream call, and the headers that carry it to the upstream."""

    span: Span
    #: ``traceparent`` (and ``tracestate``) as (name, value) pairs: HTTP headers or gRPC metadata.
    headers: tuple[tuple[str, str], ...]

    def answered(self, attributes: Mapping[str, AttributeValue]) -> None:
        """What the upstream's answer said (its status code, as the transport names it)."""
        self.span.set_attributes(attributes)


@contextmanager
def upstream_call(
    name: str, attributes: Callable[[], Mapping[str, AttributeValue]]
) -> Iterator[UpstreamCall | None]:
    """A ``CLIENT`` span named ``name`` for the call made inside the block, or None when no
    traced request is served. ``attributes`` makes the span's attributes, called only when
    there is a span: an untraced miss builds nothing. An error leaving the block ends the span
    in status ERROR with its message and ``error.type`` (its HTTP status, or the exception's
    class)."""
    requests = served()
    if not requests:
        yield None
        return
    oldest = requests[0]
    span = oldest.tracer.start_span(
        name,
        context=trace.set_span_in_context(oldest.span),
        kind=SpanKind.CLIENT,
        attributes=attributes(),
        links=[Link(request.span.get_span_context()) for request in requests[1:]],
    )
    try:
        yield UpstreamCall(span, headers_of(span))
    except BaseException as error:
        kind = str(error.status_code) if isinstance(error, ServingError) else type(error).__name__
        message = error.message if isinstance(error, ServingError) else str(error)
        span.set_attribute(names.ERROR_TYPE, kind)
        span.set_status(Status(StatusCode.ERROR, message))
        raise
    finally:
        span.end()
