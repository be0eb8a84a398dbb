"""OpenTelemetry spans for inference requests, exported over OTLP when ``OTEL_*`` asks for them.

Whether to trace is decided once, at start-up, from the standard variables (:mod:`.switch`).
When tracing is off nothing of this package runs per request: no span, no context extraction,
no context variable. When it is on, each transport extracts the W3C trace context of a request
(:mod:`.propagation`) and starts one server span under it (:func:`.request_spans.start_request`),
which is the current one (:data:`.current.CURRENT`, a :class:`.current.TracedRequest`) while the
request is answered: the layers below add to it (the traced request ledger the model and how
the cache answered, the scheduler each execution), and the transport ends it with what it sent
(:func:`.request_spans.end_request`), with the attributes of :mod:`.attributes`. The spans go
out in batches from a background thread (:class:`.pipeline.TracingPipeline`), flushed when the
server stops.
"""
