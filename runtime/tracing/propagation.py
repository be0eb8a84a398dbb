"""W3C trace context (``traceparent``, ``tracestate``) from HTTP headers and gRPC metadata, and
into the headers of a call this server makes (an upstream's).

Always the W3C format, whatever ``OTEL_PROPAGATORS`` says: it is what Triton's clients and every
OpenTelemetry SDK send by default. Only the two names are looked at, so a request without them
costs a scan of its headers and nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()
_NAMES = (b"traceparent", b"tracestate")


def context_from_headers(headers: Iterable[tuple[bytes, bytes]]) -> Context:
    """The trace context of an ASGI request's headers (empty when it carries none)."""
    carrier = {
        name.decode("latin-1"): value.decode("latin-1") for name, value in headers if name in _NAMES
    }
    return _W3C.extract(carrier) if carrier else Context()


def context_from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> Context:
    """The trace context of a gRPC call's invocation metadata (empty when it carries none)."""
    carrier = {
        key: value if isinstance(value, str) else value.decode("latin-1")
        for key, value in metadata or ()
        if key in ("traceparent", "tracestate")
    }
    return _W3C.extract(carrier) if carrier else Context()


def headers_of(span: trace.Span) -> tuple[tuple[str, str], ...]:
    """The ``traceparent`` (and ``tracestate``, if any) that make ``span`` the parent of what a
    call carrying them starts: the same pairs as HTTP headers or gRPC metadata."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return tuple(carrier.items())
