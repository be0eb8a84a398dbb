"""The span pipeline: a tracer provider, a batching processor and the exporter ``OTEL_*`` names.

Built in the server's lifespan (never at import, never for a server that does not trace) and
shut down there: :meth:`TracingPipeline.shutdown` flushes the spans still queued, so none is lost
when the server stops. The SDK reads the rest of the standard variables itself: the exporter's
endpoint, headers, certificates, compression and timeout (``OTEL_EXPORTER_OTLP_*``), the sampler
(``OTEL_TRACES_SAMPLER``, ``OTEL_TRACES_SAMPLER_ARG``), the resource (``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``) and the batching (``OTEL_BSP_*``). The global tracer provider is
left alone: the runtime's spans go through its own.
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from cachefleet.runtime.tracing.switch import Exporter

log = logging.getLogger(__name__)
#: service.name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES gives one.
DEFAULT_SERVICE_NAME = "cachefleet-runtime"
INSTRUMENTATION = "cachefleet.runtime"


class TracingPipeline:
    """A tracer and what exports its spans."""

    def __init__(self, exporter: Exporter, version: str) -> None:
        resource = Resource.create({SERVICE_VERSION: version})
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE_NAME}))
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
        self.tracer: trace.Tracer = self._provider.get_tracer(INSTRUMENTATION, version)
        log.info(
            "tracing requests: %s exporter, service.name %s",
            exporter,
            resource.attributes.get(SERVICE_NAME),
        )

    def shutdown(self) -> None:
        """Export what is queued, then stop (blocks up to the exporter's timeout)."""
        self._provider.shutdown()


def _exporter(name: Exporter) -> SpanExporter:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()
