"""W3C trace context from HTTP headers and gRPC metadata."""

from __future__ import annotations

from opentelemetry import trace

from cachefleet.runtime.tracing.propagation import context_from_headers, context_from_metadata

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{SPAN_ID}-01"


def parent(context: object) -> trace.SpanContext:
    return trace.get_current_span(context).get_span_context()  # type: ignore[arg-type]


def test_headers_give_the_callers_span_as_a_remote_parent() -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"traceparent", TRACEPARENT.encode()),
        (b"tracestate", b"vendor=value"),
    ]
    span = parent(context_from_headers(headers))
    assert format(span.trace_id, "032x") == TRACE_ID
    assert format(span.span_id, "016x") == SPAN_ID
    assert span.is_remote
    assert span.trace_flags.sampled
    assert span.trace_state.get("vendor") == "value"


def test_metadata_gives_the_same_parent() -> None:
    span = parent(context_from_metadata((("traceparent", TRACEPARENT), ("x-other", b"1"))))
    assert format(span.trace_id, "032x") == TRACE_ID
    assert format(span.span_id, "016x") == SPAN_ID


def test_no_or_a_broken_traceparent_gives_no_parent() -> None:
    for headers in ([], [(b"traceparent", b"00-nonsense-01")]):
        assert not parent(context_from_headers(headers)).is_valid
    assert not parent(context_from_metadata(None)).is_valid
