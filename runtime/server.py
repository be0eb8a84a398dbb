"""What uvicorn serves: the HTTP app, whose lifespan opens the runtime and starts gRPC beside it.

The runtime's parts are built once, by ``Runtime.open`` (the composition root), inside the
worker's event loop; the HTTP app and the gRPC server are siblings that receive them. Each
worker process (``--workers N``) opens its own runtime, with its own metrics registry.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import ASGIApp

from cachefleet.runtime.composition import Runtime, RuntimeSlot
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.grpc.server import start_grpc_server, stop_grpc_server
from cachefleet.runtime.http.app import create_app
from cachefleet.runtime.http.environment import configure_logging, settings_from_environment
from cachefleet.runtime.tracing.switch import Exporter, exporter_asked


def create_server(settings: RuntimeSettings) -> ASGIApp:
    """The server for ``settings``; models load when it starts, not here.

    Whether to trace is decided here, once, from ``OTEL_*``: only then are infer requests
    served in spans and the runtime opened with a span pipeline.
    """
    slot = RuntimeSlot(settings)
    exporter = exporter_asked(os.environ)

    @asynccontextmanager
    async def lifespan(app: object) -> AsyncIterator[None]:
        async with _serving(slot, exporter):
            yield

    return create_app(slot, lifespan, traced=exporter is not None)


def create_server_from_environment() -> ASGIApp:
    """uvicorn factory for worker processes (``--workers`` > 1)."""
    settings = settings_from_environment(os.environ)
    configure_logging(settings.server.log_level)
    return create_server(settings)


@asynccontextmanager
async def _serving(slot: RuntimeSlot, trace_exporter: Exporter | None) -> AsyncIterator[None]:
    """Open the runtime, serve it over gRPC (``--grpc-port``) and HTTP, and close it after.
    Until it is open ``/v2/health/live`` fails, which a startup probe allows for."""
    settings = slot.settings
    async with Runtime.open(settings, trace_exporter=trace_exporter) as runtime:
        grpc_server = None
        if settings.server.grpc_port:
            grpc_server = await start_grpc_server(runtime)
        slot.runtime = runtime
        try:
            yield
        finally:
            slot.runtime = None
            if grpc_server is not None:
                await stop_grpc_server(grpc_server)
