"""Starting and ending the server span of one inference request.

Started by the transport when the request arrives, under the caller's W3C context, and ended
when the answer has gone out, with how the cache answered and the queue and compute times the
layers below noted (:mod:`.current`). A failed request's span ends with status ERROR, its message
and ``error.type`` (the status code): a 4xx is a failure too (the client's), which OpenTelemetry's
HTTP conventions would leave unset on a server span; here every answer that is not a success is
one to find.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import TracedRequest


def start_request(
    tracer: trace.Tracer, name: str, parent: Context, attributes: Mapping[str, AttributeValue]
) -> TracedRequest:
    """A started server span for one request."""
    span = tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes)
    return TracedRequest(span, tracer)


def end_request(
    traced: TracedRequest,
    status: Mapping[str, AttributeValue],
    *,
    cache_result: str | None,
    error: tuple[str, str] | None,
) -> None:
    """End the span: ``status`` (the transport's status attributes), ``cache_result`` (the
    X-Cache value the transport sent, if the ledger noted none), ``error`` (its type and
    message, if the request failed)."""
    span = traced.span
    span.set_attributes(status)
    cache_result = traced.take_cache_result() or cache_result
    if cache_result is not None:
        span.set_attribute(names.CACHE_RESULT, cache_result)
        tier = names.tier_of_result(cache_result)
        if tier is not None:
            span.set_attribute(names.CACHE_TIER, tier)
    times = traced.take_executions()
    if times is not None:
        span.set_attribute(names.QUEUE_DURATION, times[0] / 1e9)
        span.set_attribute(names.COMPUTE_DURATION, times[1] / 1e9)
    if error is not None:
        span.set_attribute(names.ERROR_TYPE, error[0])
        span.set_status(Status(StatusCode.ERROR, error[1]))
    span.end()
