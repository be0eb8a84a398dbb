"""The FastAPI application: built on demand, loaded and closed by its lifespan.

``create_app`` does no work: the lifespan loads the repository (off the event loop), builds the
metrics registry and the cache, starts the gRPC server (``--grpc-port``) in the same event loop
on the same service, and closes all of it on shutdown. Each app, and so each worker process, has
its own metrics registry.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp

from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc.server import start_grpc_server, stop_grpc_server
from cachefleet.runtime.http.errors import handle_error
from cachefleet.runtime.http.front_door import InferFrontDoor
from cachefleet.runtime.http.routes import build_routes
from cachefleet.runtime.http.state import ServerState
from cachefleet.runtime.http.traced import TracedInfer
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.repository import load_repository
from cachefleet.runtime.service import (
    InferenceService,
    InFlight,
    ModelControl,
    SharedMemoryRegistry,
    StatisticsRegistry,
)
from cachefleet.runtime.service.model_info import ModelInfo
from cachefleet.runtime.tracing.pipeline import TracingPipeline
from cachefleet.runtime.tracing.switch import exporter_asked

log = logging.getLogger(__name__)


def create_app(settings: RuntimeSettings) -> FastAPI:
    """The server for ``settings``; models load when the app starts, not here."""
    return _application(ServerState(settings))


def create_server(settings: RuntimeSettings) -> ASGIApp:
    """What uvicorn serves: the infer fast path in front of :func:`create_app`'s application,
    both over one server state. Whether to trace is decided here, once, from ``OTEL_*``: only
    then does the trace context of each inference request get read (:class:`TracedInfer`)."""
    state = ServerState(settings, trace_exporter=exporter_asked(os.environ))
    server = InferFrontDoor(_application(state), state)
    return server if state.trace_exporter is None else TracedInfer(server, state)


def _application(state: ServerState) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with _serving(state):
            yield

    app = FastAPI(
        title="cachefleet",
        version=state.version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # The server exports Prometheus metrics itself; skip FastAPI's per-request telemetry.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        routes=build_routes(state),
    )
    for error_type in (ServingError, HTTPException, Exception):
        app.add_exception_handler(error_type, handle_error)
    return app


@asynccontextmanager
async def _serving(state: ServerState) -> AsyncIterator[None]:
    """Load, then serve. Loading blocks startup on purpose: with several workers on one port a
    worker must not accept requests before its models are in, or clients would see 503s from a
    half-loaded fleet; until then ``/v2/health/live`` fails, which a startup probe allows for."""
    settings = state.settings
    if settings.models.repository is None:
        raise ModelLoadError("no model repository configured (--model-repository)")
    metrics = RuntimeMetrics()
    state.metrics = metrics
    repository = await asyncio.to_thread(
        load_repository, settings.models.repository, settings.models, _models_to_load(settings)
    )
    executor = ThreadPoolExecutor(
        max_workers=_model_threads(), thread_name_prefix="cachefleet-model"
    )
    cache = build_cache(settings, metrics)
    grpc_server = None
    if state.trace_exporter is not None:
        state.tracing = TracingPipeline(state.trace_exporter, state.version)
    try:
        await cache.start()
        statistics, in_flight = StatisticsRegistry(), InFlight()
        state.shared_memory = SharedMemoryRegistry()
        service = InferenceService(
            repository,
            cache,
            metrics,
            settings,
            executor,
            statistics,
            in_flight,
            state.shared_memory,
        )
        state.service = service
        metrics.registry.register(ModelInfo(repository))
        state.control = ModelControl(
            repository,
            statistics,
            in_flight,
            settings.models.control_mode,
            release=service.release_model,
            max_file_bytes=settings.server.max_request_bytes,
        )
        if settings.server.grpc_port:
            grpc_server = await start_grpc_server(settings.server, settings.security, state)
        # Everything made so far (modules, models, sessions) lives as long as the server: out of
        # the collector's sight, a full collection walks only what requests and the cache made.
        gc.freeze()
        log.info(
            "serving %d model version(s) from %s, cache %s",
            sum(entry.state == "READY" for entry in repository.index()),
            settings.models.repository,
            settings.cache.mode,
        )
        yield
    finally:
        if grpc_server is not None:
            await stop_grpc_server(grpc_server)
        if state.service is not None:
            await state.service.close()
        state.service = None
        state.control = None
        if state.shared_memory is not None:
            state.shared_memory.close()
            state.shared_memory = None
        await cache.close()
        executor.shutdown(wait=True, cancel_futures=True)
        repository.close()
        if state.tracing is not None:
            # Last, once no request can end any more: the spans still queued go out now.
            await asyncio.to_thread(state.tracing.shutdown)
            state.tracing = None


def _models_to_load(settings: RuntimeSettings) -> frozenset[str] | None:
    """The models to load at start: all (None) unless explicit mode names some ('*': all)."""
    if settings.models.control_mode == "none" or "*" in settings.models.load_models:
        return None
    return frozenset(settings.models.load_models)


def _model_threads() -> int:
    """Concurrent model runs: one per usable core (at least 2, at most 8), so that inference
    never blocks the event loop and ONNX Runtime's own thread pools are not oversubscribed."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(8, cores or 1))
