"""The composition root: the one place the runtime's parts are built and closed.

``async with Runtime.open(settings) as runtime`` loads the repository (off the event loop),
builds the metrics registry, the model threads, the cache, the request ledger, the service,
model control and the shared-memory registry, and closes all of it when the block ends. The
transports (the HTTP app, the gRPC server) are siblings that receive the frozen
:class:`Runtime`; neither builds anything, and neither knows the other. Until the parts are in,
:class:`RuntimeSlot` answers for them with NotReadyError (a 503), which is what a client sees
while the models load.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.api import ResponseCache
from cachefleet.runtime.cache.factory import build_admission, build_cache, build_memo
from cachefleet.runtime.cache.memo import ResponseMemo
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import NotReadyError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.repository import NOT_LOADED, READY, load_repository
from cachefleet.runtime.models.types import ModelRepository
from cachefleet.runtime.models.upstream.repository import UpstreamRepository, open_upstream
from cachefleet.runtime.service import (
    InferenceService,
    InFlight,
    ModelControl,
    SharedMemoryRegistry,
    StatisticsRegistry,
)
from cachefleet.runtime.service.memo_answers import MemoAnswers
from cachefleet.runtime.service.model_info import ModelInfo
from cachefleet.runtime.service.request_budget import RequestBudget
from cachefleet.runtime.service.request_ledger import RequestLedger
from cachefleet.runtime.service.traced_ledger import TracedLedger
from cachefleet.runtime.tracing.switch import Exporter

if TYPE_CHECKING:  # the SDK is imported only by a server that traces
    from cachefleet.runtime.tracing.pipeline import TracingPipeline

log = logging.getLogger(__name__)


def package_version() -> str:
    """The installed distribution's version (``0.0.0`` from a bare source tree)."""
    try:
        return version("cachefleet")
    except PackageNotFoundError:
        return "0.0.0"


@dataclass(frozen=True, slots=True)
class Runtime:
    """The parts of a running server, built by :meth:`open` and shared by every transport."""

    settings: RuntimeSettings
    metrics: RuntimeMetrics
    repository: ModelRepository
    cache: ResponseCache
    #: Which cache tiers each model uses (read-only for the transports: the memo asks it).
    admission: AdmissionPolicy
    ledger: RequestLedger
    service: InferenceService
    control: ModelControl
    shared_memory: SharedMemoryRegistry
    #: Requests and request bytes in flight, shared by HTTP and gRPC (see its module).
    budget: RequestBudget
    #: The span pipeline when the server traces (``OTEL_*``), else None.
    tracing: TracingPipeline | None = None
    #: The answer memo (see ``cache.memo``); None where no local tier can vouch for its
    #: answers (``--cache none`` or ``redis``). The transports use it only as served, below.
    memo: ResponseMemo | None = None
    #: The memo as both transports are answered from it (``service.memo_answers``); None
    #: without a memo.
    memo_answers: MemoAnswers | None = None

    def unready_models(self) -> list[str]:
        """The models that keep the server from being ready under ``--strict-readiness``
        (none without it): each one the server was asked to serve (every folder, or in
        explicit mode those named by ``--load-model`` and loaded since) with a version that is
        not READY, as Triton's strict readiness judges. Health probes read it; the two
        transports answer from this one decision."""
        if not self.settings.server.strict_readiness:
            return []
        entries = self.repository.index()
        return sorted({e.name for e in entries if e.state != READY and e.reason != NOT_LOADED})

    @classmethod
    @asynccontextmanager
    async def open(
        cls, settings: RuntimeSettings, *, trace_exporter: Exporter | None = None
    ) -> AsyncIterator[Runtime]:
        """Build every part for ``settings``, yield them, close them in reverse order.

        Loading blocks on purpose: with several workers on one port a worker must not accept
        requests before its models are in, or clients would see 503s from a half-loaded fleet.
        With a ``trace_exporter`` (what ``OTEL_*`` asked for, see ``tracing.switch``) the span
        pipeline is built first and shut down last, flushing every span; the ledger is then the
        traced one.
        """
        metrics = RuntimeMetrics()
        repository = await _open_repository(settings)
        if isinstance(repository, UpstreamRepository):
            watched = repository
            metrics.upstream_circuit_open.set_function(lambda: float(watched.circuit_open))
        async with AsyncExitStack() as stack:
            tracing = None
            if trace_exporter is not None:
                from cachefleet.runtime.tracing.pipeline import TracingPipeline

                tracing = TracingPipeline(trace_exporter, package_version())
                stack.push_async_callback(asyncio.to_thread, tracing.shutdown)
            stack.callback(repository.close)
            executor = ThreadPoolExecutor(
                max_workers=_model_threads(settings), thread_name_prefix="cachefleet-model"
            )
            stack.callback(executor.shutdown, wait=True, cancel_futures=True)
            admission = build_admission(settings)
            memo = build_memo(settings)
            cache = build_cache(settings, metrics, admission, memo)
            stack.push_async_callback(cache.close)
            await cache.start()
            shared_memory = SharedMemoryRegistry(
                max_request_read_bytes=settings.server.max_request_bytes
            )
            stack.callback(shared_memory.close)
            ledger_type = RequestLedger if tracing is None else TracedLedger
            ledger = ledger_type(metrics, StatisticsRegistry(admission), InFlight())
            service = InferenceService(
                repository, cache, metrics, settings, executor, ledger, shared_memory
            )
            stack.push_async_callback(service.close)
            metrics.registry.register(ModelInfo(repository))
            # Loads get a thread of their own (they run one at a time), not the loop's default
            # executor: nothing a client holds open elsewhere can hold a load back.
            loads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cachefleet-control")
            stack.callback(loads.shutdown, wait=True, cancel_futures=True)
            control = ModelControl(
                repository,
                ledger.statistics,
                ledger.in_flight,
                settings.models.control_mode,
                loads,
                max_file_bytes=settings.server.max_request_bytes,
            )
            control.on_release(service.release_model)
            if memo is not None:
                control.on_release(_forgetting(memo))
            limits = settings.limits
            budget = RequestBudget(limits.max_requests_in_flight, limits.max_inflight_bytes)
            memo_answers = None if memo is None else MemoAnswers(memo, ledger, service)
            runtime = cls(
                settings, metrics, repository, cache, admission, ledger, service, control,
                shared_memory,
                budget, tracing, memo, memo_answers,
            )  # fmt: skip
            # Everything made so far (modules, models, sessions) lives as long as the server:
            # out of the collector's sight, a full collection walks only what requests and the
            # cache made.
            gc.freeze()
            log.info(
                "serving %d model version(s) from %s, cache %s",
                sum(entry.state == "READY" for entry in repository.index()),
                settings.upstream.url or settings.models.repository,
                settings.cache.mode,
            )
            if unready := runtime.unready_models():
                log.warning("not ready (--strict-readiness): %s failed to load", ", ".join(unready))
            yield runtime


@dataclass
class RuntimeSlot:
    """Where a transport finds the runtime: empty until :meth:`Runtime.open` has built it."""

    settings: RuntimeSettings
    runtime: Runtime | None = None
    version: str = field(default_factory=package_version)

    def ready(self) -> Runtime:
        """The runtime, or NotReadyError (503) while the models load."""
        if self.runtime is None:
            raise NotReadyError("the server is still loading its models")
        return self.runtime


def _forgetting(memo: ResponseMemo) -> Callable[[str], Awaitable[None]]:
    """What model control calls when a model is unloaded or loaded again."""

    async def forget(name: str) -> None:
        memo.forget_model(name)

    return forget


def _models_to_load(settings: RuntimeSettings) -> frozenset[str] | None:
    """The models to load at start: all (None) unless explicit mode names some ('*': all)."""
    if settings.models.control_mode == "none" or "*" in settings.models.load_models:
        return None
    return frozenset(settings.models.load_models)


async def _open_repository(settings: RuntimeSettings) -> ModelRepository:
    """The model source: the upstream's models (``--upstream``), else the local repository;
    built off the event loop."""
    if settings.upstream.url is not None:
        return await open_upstream(settings.upstream)
    if settings.models.repository is None:
        raise ModelLoadError("no model repository configured (--model-repository)")
    return await asyncio.to_thread(
        load_repository, settings.models.repository, settings.models, _models_to_load(settings)
    )


def _model_threads(settings: RuntimeSettings) -> int:
    """Concurrent model runs: one per usable core (at least 2, at most 8), so that inference
    never blocks the event loop and ONNX Runtime's own thread pools are not oversubscribed.
    An upstream's runs wait on the network, not a core: ``--upstream-max-in-flight`` of them."""
    if settings.upstream.url is not None:
        return settings.upstream.max_in_flight
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(2, min(8, cores or 1))
