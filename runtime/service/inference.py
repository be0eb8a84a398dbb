"""The inference service: one request from its transport's form to a rendered response.

Per request: resolve the model, decode and validate the request, ask the cache for the outputs
(on a miss, the model's scheduler runs them off the event loop, batched with other misses when
the model asks for dynamic batching), then render them as this client asked. The cache
sees only the raw output tensors, never the rendering. Decoding and rendering are the
transport's (HTTP bodies, gRPC messages); everything between them is shared, so the same tensors
sent over either transport are one cache entry, one single-flight, one batch queue, one set of
metrics and statistics, counted in one request ledger.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from cachefleet.runtime.cache.api import (
    CacheDirectives,
    CacheRequest,
    CacheStatus,
    Compute,
    LocalEntryToken,
    ResponseCache,
)
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.terms import on_terms
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import NotReadyError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.heap import release_freed_memory
from cachefleet.runtime.models.types import Model, ModelConfig, ModelRepository
from cachefleet.runtime.protocol import (
    InferRequest,
    model_metadata,
    repository_index,
)
from cachefleet.runtime.service import rows
from cachefleet.runtime.service.request_ledger import Passage, RequestLedger
from cachefleet.runtime.service.row_cache import answer_by_rows
from cachefleet.runtime.service.scheduler import ModelScheduler, OnWait
from cachefleet.runtime.service.schedulers import Schedulers
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry
from cachefleet.runtime.tensor import Tensor

_NO_CACHE = CacheDirectives(lookup=False, store=False)
#: The config parameter that reports a model version's fingerprint (contract).
FINGERPRINT_PARAMETER = "cachefleet.fingerprint"
Rendered = TypeVar("Rendered")
#: Decodes and validates a transport's request against the model's configuration.
Decoder = Callable[[ModelConfig], InferRequest]


class DecodeInThread(NamedTuple):
    """A decoder to run in a worker thread: a decode long enough (a large JSON body, tens of
    milliseconds per MiB) that the event loop should not be held for it in one piece. The JSON
    parser keeps the interpreter lock while it parses, so what the loop gains is everything
    around the parse."""

    decode: Decoder


@dataclass(frozen=True, slots=True)
class InferAnswer:
    """The computed outputs of one request, before the transport renders them."""

    model: Model
    request: InferRequest
    #: Every output the model computed (or the cache held), whatever the request selected.
    outputs: list[Tensor]
    cache_status: CacheStatus
    #: For a local hit, the liveness token of the entry it came from (see ``cache.api``).
    local_entry: LocalEntryToken | None = None


#: Renders an answer in the transport's form; may raise ServingError (e.g. non-UTF-8 JSON).
Renderer = Callable[[InferAnswer], Rendered]


class InferenceService:
    """Serves inference and metadata for a loaded repository through a response cache."""

    def __init__(
        self,
        repository: ModelRepository,
        cache: ResponseCache,
        metrics: RuntimeMetrics,
        settings: RuntimeSettings,
        executor: Executor,
        ledger: RequestLedger,
        shared_memory: SharedMemoryRegistry,
    ) -> None:
        """``ledger`` (its statistics and in-flight counts) is shared with
        :class:`ModelControl`, which forgets an unloaded model's statistics and waits for its
        requests; ``shared_memory`` with the shared-memory endpoints."""
        self._repository = repository
        self._cache = cache
        self._metrics = metrics
        self._executor = executor
        self._cache_all = settings.models.cache_all_models
        self._row_cache_models = frozenset(settings.models.row_cache_models)
        self._default_ttl_s = settings.cache.ttl_s
        self._ledger = ledger
        self._statistics = ledger.statistics
        self._shared_memory = shared_memory
        self._schedulers = Schedulers(executor, metrics, self._statistics)

    async def close(self) -> None:
        """Stop the models' batchers (executions already running finish)."""
        await self._schedulers.close()

    async def release_model(self, name: str) -> None:
        """Let go of everything kept for model ``name`` (its batchers),
        once it is unloaded or loaded again: its old sessions are then freed, and the memory
        they held goes back to the system."""
        await self._schedulers.release(name)
        await asyncio.to_thread(release_freed_memory)

    async def answer(
        self,
        model_name: str,
        version: str | None,
        decode: Decoder | DecodeInThread,
        render: Renderer[Rendered],
        directives: CacheDirectives,
        on_wait: OnWait | None = None,
        *,
        transport: str,
    ) -> Rendered:
        """Answer one request of any transport: resolve its model (once), ``decode`` it,
        compute or look up its outputs, ``render`` them. Raises ServingError subclasses for the
        client; success and failure are counted in the request ledger, so every transport
        reports the same."""
        started = time.perf_counter_ns()
        model = self._repository.get(model_name, version)

        async def work(passage: Passage) -> Rendered:
            return await self._answer(model, passage, decode, render, directives, on_wait)

        # No await since get(): the passage opens before an unload could slip in.
        return await self._ledger.accounted(model, transport, started, work)

    async def _answer(
        self,
        model: Model,
        passage: Passage,
        decode: Decoder | DecodeInThread,
        render: Renderer[Rendered],
        directives: CacheDirectives,
        on_wait: OnWait | None,
    ) -> Rendered:
        """Decode, look up or compute, render; the cache's outcome goes into ``passage``."""
        config = model.config
        if isinstance(decode, DecodeInThread):
            request = await asyncio.to_thread(decode.decode, config)
        else:
            request = decode(config)
        parameters = request.keyed_parameters()
        scheduler = self._schedulers.of(model)
        directives = directives if request.use_cache else _NO_CACHE
        enabled = config.response_cache or self._cache_all
        by_rows = (
            (scheduler.policy.row_cache or model.name in self._row_cache_models)
            and config.max_batch_size > 0
            and enabled
            and directives.lookup
            and rows.batch_rows(request.inputs) > 1
        )
        cache_request = CacheRequest(
            model=model.name,
            version=model.version,
            inputs=request.inputs,
            parameters=parameters,
            enabled=enabled,
            ttl_s=self._default_ttl_s if config.cache_ttl_s is None else config.cache_ttl_s,
            fingerprint=model.fingerprint,
        )
        miss = _Miss()
        # Made before the cache is asked: it checks the request's priority (``_compute``).
        compute = self._compute(scheduler, request, cache_request, by_rows, on_wait, miss)
        cache_started = time.perf_counter_ns()
        outputs, status, local_entry = await self._cache.get_or_compute(
            cache_request, directives, compute
        )
        cache_ns = time.perf_counter_ns() - cache_started
        if miss.row_status is not None and status is CacheStatus.MISS:
            status = miss.row_status  # the whole request missed; its rows may not have
        self._write_shared_memory(request, outputs)
        rendered = render(InferAnswer(model, request, outputs, status, local_entry))
        passage.cache_status, passage.cache_ns, passage.model_ns = status, cache_ns, miss.waited_ns
        return rendered

    def _compute(
        self,
        scheduler: ModelScheduler,
        request: InferRequest,
        cache_request: CacheRequest,
        by_rows: bool,
        on_wait: OnWait | None,
        miss: _Miss,
    ) -> Compute:
        """How a miss is computed: through the model's scheduler, row by row through the row
        cache when ``by_rows``; what happened goes into ``miss``. Made before the cache is
        asked, so it checks the request's priority against the model's levels (its form was
        checked while decoding) for every request, hit or miss: a request's own mistake fails
        it alone, never one that joined it in flight."""
        priority = _priority(request.parameters)
        scheduler.check_priority(priority)
        timeout_us = _timeout_us(request.parameters)
        # Identical requests share a computation only on the same terms (``cache.terms``).
        terms = scheduler.terms(priority, timeout_us)

        async def run(inputs: Sequence[Tensor]) -> list[Tensor]:
            started = time.perf_counter_ns()
            try:
                return await scheduler.run(inputs, priority, on_wait, timeout_us)
            finally:
                miss.waited_ns += time.perf_counter_ns() - started

        if not by_rows:
            # One run and nothing else: the scheduler says how the cache may treat it.
            return scheduler.compute(functools.partial(run, request.inputs), terms)

        async def compute_by_rows() -> list[Tensor]:
            answer = await answer_by_rows(self._cache, cache_request, run, terms)
            miss.row_status = answer.status
            return answer.outputs

        # Its row lookups await the tiers and can be interrupted: ordinary work, whatever the
        # scheduler.
        return on_terms(compute_by_rows, terms)

    def _write_shared_memory(self, request: InferRequest, outputs: Sequence[Tensor]) -> None:
        """Write the outputs the client asked for in shared memory into their regions."""
        by_name = {tensor.name: tensor for tensor in outputs}
        for wanted in request.outputs:
            window, tensor = wanted.shared_memory, by_name.get(wanted.name)
            if window is not None and tensor is not None:
                self._shared_memory.write(
                    window.region, window.offset, window.byte_size, tensor.data
                )

    def model(self, name: str, version: str | None) -> Model:
        """The loaded model ``name`` (at ``version``); raises ModelNotFoundError."""
        return self._repository.get(name, version)

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        model = self._repository.get(name, version)
        versions = [version] if version is not None else self._repository.versions(name)
        return model_metadata(model, versions)

    def model_config(self, name: str, version: str | None) -> dict[str, Any]:
        """Triton's config document, with the version's fingerprint among its ``parameters``
        (:data:`FINGERPRINT_PARAMETER`), so a rollout can be watched from any client."""
        model = self._repository.get(name, version)
        document = dict(model.config.document)
        parameters = dict(document.get("parameters") or {})
        parameters[FINGERPRINT_PARAMETER] = {"string_value": model.fingerprint}
        document["parameters"] = parameters
        return document

    def check_model(self, name: str, version: str | None) -> None:
        """Raise ModelNotFoundError unless the model (at ``version``) is loaded."""
        self._repository.get(name, version)

    def index(self, *, ready_only: bool) -> list[Any]:
        return repository_index(self._repository.index(), ready_only=ready_only)

    def statistics(self, name: str | None = None, version: str | None = None) -> dict[str, Any]:
        """Triton's ``ModelStatisticsResponse`` as a dict (proto field names, integer values).

        ``name`` None: every loaded model version; ``version`` None: every loaded version of
        ``name``. Raises ModelNotFoundError for a model or version that is not loaded.
        """
        loaded = [
            (entry.name, entry.version)
            for entry in self._repository.index()
            if entry.state == "READY"
        ]
        return self._statistics.report(loaded, name, version)

    async def flush(self, name: str) -> int:
        """Remove a loaded model's entries from every cache tier; returns how many went.

        A tier that cannot be flushed is a 503: unlike a lookup, a flush that silently did
        nothing would leave stale answers in place.
        """
        self._repository.versions(name)
        try:
            return await self._cache.flush(name)
        except CacheTierError as error:
            raise NotReadyError(f"cache flush of model {name!r} failed: {error}") from error


def _priority(parameters: Mapping[str, Any]) -> int:
    """The request parameter ``priority`` (0, the default level, when absent); checked while
    the request was decoded."""
    return int(parameters.get("priority", 0))


def _timeout_us(parameters: Mapping[str, Any]) -> int:
    """The request parameter ``timeout`` (microseconds in the queue; 0, none, when absent);
    checked while the request was decoded."""
    return int(parameters.get("timeout", 0))


@dataclass(slots=True)
class _Miss:
    """What this request's compute did, if it ran (a hit or a follower of an identical request
    in flight runs none): its time waiting for and in model executions, and the row cache's
    status."""

    waited_ns: int = 0
    row_status: CacheStatus | None = None
