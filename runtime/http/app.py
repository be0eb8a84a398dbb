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

from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc.server import start_grpc_server, stop_grpc_server
from cachefleet.runtime.http.errors import handle_error
from cachefleet.runtime.http.infer_answers import MemoizedAnswers, ServiceAnswers
from cachefleet.runtime.http.infer_endpoint import InferEndpoint
from cachefleet.runtime.http.infer_shortcut import InferShortcut
from cachefleet.runtime.http.response_memo import ResponseMemo
from cachefleet.runtime.http.routes import build_routes
from cachefleet.runtime.http.state import ServerState
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
from cachefleet.runtime.service.request_ledger import RequestLedger

log = logging.getLogger(__name__)


def create_app(settings: RuntimeSettings) -> InferShortcut:
    """The server for ``settings``, as uvicorn serves it: the FastAPI application with the
    infer shortcut in front; models load when it starts, not here."""
    state = ServerState(settings)
    infer = InferEndpoint(state)
    return InferShortcut(_application(state, infer), infer, settings.limits)


def _application(state: ServerState, infer: InferEndpoint) -> FastAPI:
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
        routes=build_routes(state, infer),
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
    try:
        await cache.start()
        statistics, in_flight = StatisticsRegistry(), InFlight()
        state.shared_memory = SharedMemoryRegistry()
        ledger = RequestLedger(metrics, statistics, in_flight)
        service = InferenceService(
            repository, cache, metrics, settings, executor, ledger, state.shared_memory
        )
        state.service = service
        metrics.registry.register(ModelInfo(repository))
        answers = _answers(settings, service, state.shared_memory, ledger)
        state.answers = answers

        async def release(name: str) -> None:
            await service.release_model(name)
            if isinstance(answers, MemoizedAnswers):
                answers.memo.discard_model(name)

        state.control = ModelControl(
            repository,
            statistics,
            in_flight,
            settings.models.control_mode,
            release=release,
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


def _answers(
    settings: RuntimeSettings,
    service: InferenceService,
    shared_memory: SharedMemoryRegistry,
    ledger: RequestLedger,
) -> ServiceAnswers:
    """The infer endpoint's answers: memoized where a local tier can vouch for them (``local``,
    ``tiered``), with a memo of an eighth of the local tier's bound, on top of it."""
    if settings.cache.mode not in ("local", "tiered"):
        return ServiceAnswers(service, shared_memory)
    memo = ResponseMemo(settings.cache.local_size_bytes // 8)
    return MemoizedAnswers(service, shared_memory, memo, ledger)


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
