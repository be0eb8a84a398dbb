"""OpenTelemetry spans for inference requests, exported over OTLP when ``OTEL_*`` asks for them.

Whether to trace is decided once, at start-up, from the standard variables (:mod:`.switch`).
When tracing is off nothing of this package runs per request: no span, no context extraction,
no context variable. When it is on, the transports extract the W3C trace context of each
request into an :class:`~.origin.Origin` (:mod:`.propagation`), and :class:`~.request_spans.
RequestSpans` turns each answered request into one server span under it, with the attributes of
:mod:`.attributes`. The spans go out in batches from a background thread (:mod:`.pipeline`),
flushed when the server stops.
"""
