"""The inference service: one request from its transport's form to a rendered response.

Per request: resolve the model, decode and validate the request, ask the cache for the outputs
(on a miss, the model's scheduler runs them off the event loop, batched with other misses when
the model asks for dynamic batching), then render them as this client asked. The cache
sees only the raw output tensors, never the rendering. Decoding and rendering are the
transport's (HTTP bodies, gRPC messages); everything between them is shared, so the same tensors
sent over either transport are one cache entry, one single-flight, one batch queue, one set of
metrics and statistics. With a local tier, a byte-identical repeat of an HTTP request is
answered from a memo of rendered responses (see ``memo`` and ``memo_answers``) before any of
that, for as long as the local entry it was rendered from lives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

from blake3 import blake3

from cachefleet.runtime.cache.api import (
    CacheDirectives,
    CacheRequest,
    CacheStatus,
    Compute,
    ResponseCache,
)
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.key import CacheKey, compute_key
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import NotReadyError, ServingError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.metrics import TritonInferenceCounters as TRITON
from cachefleet.runtime.models.heap import release_freed_memory
from cachefleet.runtime.models.types import Model, ModelConfig, ModelRepository
from cachefleet.runtime.protocol import (
    InferRequest,
    decode_request,
    encode_response,
    model_metadata,
    repository_index,
)
from cachefleet.runtime.service import rows
from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.memo import Memoized, ResponseMemo
from cachefleet.runtime.service.memo_answers import MemoAnswers
from cachefleet.runtime.service.request_series import RequestSeries
from cachefleet.runtime.service.row_cache import answer_by_rows
from cachefleet.runtime.service.scheduler import ModelScheduler, OnWait, Schedulers
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry
from cachefleet.runtime.service.statistics import ModelStatistics, StatisticsRegistry
from cachefleet.runtime.tensor import Tensor

_NO_CACHE = CacheDirectives(lookup=False, store=False)
#: The config parameter that reports a model version's fingerprint (contract).
FINGERPRINT_PARAMETER = "cachefleet.fingerprint"
Rendered = TypeVar("Rendered")
#: Decodes and validates a transport's request against the model's configuration.
Decoder = Callable[[ModelConfig], InferRequest]


@dataclass(frozen=True, slots=True)
class InferOutcome:
    """A rendered response and how the cache answered it."""

    body: bytes
    #: JSON header length when binary outputs follow the header, else None.
    header_length: int | None
    cache_status: CacheStatus


class _RecordingReader:
    """The shared-memory registry as the decoder sees it, noting whether it was read: a
    request whose inputs come from shared memory is never memoized (its body does not hold
    its inputs)."""

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._registry = registry
        self.used = False

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        self.used = True
        return self._registry.read(name, offset, byte_size)


@dataclass(frozen=True, slots=True)
class InferAnswer:
    """The computed outputs of one request, before the transport renders them."""

    model: Model
    request: InferRequest
    #: Every output the model computed (or the cache held), whatever the request selected.
    outputs: list[Tensor]
    cache_status: CacheStatus
    #: The request's cache key when it was computed before the lookup (for the HTTP memo).
    key: CacheKey | None = None


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
        statistics: StatisticsRegistry | None = None,
        in_flight: InFlight | None = None,
        shared_memory: SharedMemoryRegistry | None = None,
    ) -> None:
        """``statistics`` and ``in_flight`` are shared with :class:`ModelControl` (which forgets
        an unloaded model's statistics and waits for its requests), ``shared_memory`` with the
        shared-memory endpoints; each is made here when not given."""
        self._repository = repository
        self._cache = cache
        self._metrics = metrics
        self._executor = executor
        self._cache_all = settings.models.cache_all_models
        self._row_cache_models = frozenset(settings.models.row_cache_models)
        self._default_ttl_s = settings.cache.ttl_s
        self._series = RequestSeries(metrics)
        self._statistics = statistics if statistics is not None else StatisticsRegistry()
        #: Rendered responses, only where a local tier can vouch for them (``local``, ``tiered``);
        #: an eighth of the local tier's bound, on top of it.
        self._memo = (
            MemoAnswers(
                ResponseMemo(settings.cache.local_size_bytes // 8),
                repository,
                cache,
                metrics,
                self._series,
                self._statistics,
                cache_all=self._cache_all,
            )
            if settings.cache.mode in ("local", "tiered")
            else None
        )
        self._in_flight = in_flight if in_flight is not None else InFlight()
        self._shared_memory = shared_memory if shared_memory is not None else SharedMemoryRegistry()
        self._schedulers = Schedulers(executor, metrics, self._statistics)

    async def close(self) -> None:
        """Stop the models' batchers (executions already running finish)."""
        await self._schedulers.close()

    async def release_model(self, name: str) -> None:
        """Let go of everything kept for model ``name`` (its batchers and memoized responses),
        once it is unloaded or loaded again: its old sessions are then freed, and the memory
        they held goes back to the system."""
        await self._schedulers.release(name)
        if self._memo is not None:
            self._memo.memo.discard_model(name)
        await asyncio.to_thread(release_freed_memory)

    def memo_hasher(
        self,
        model_name: str,
        version: str | None,
        header_length: int | None,
        directives: CacheDirectives,
    ) -> blake3 | None:
        """A hasher to feed an HTTP request's body to, for :meth:`memo_answer` and then
        :meth:`infer`'s ``digest``; None when no memoized answer can serve the request."""
        if self._memo is None:
            return None
        return self._memo.hasher(model_name, version, header_length, directives)

    def memo_answer(
        self, model_name: str, version: str | None, digest: bytes, started_ns: int
    ) -> Memoized | None:
        """The memoized response of a byte-identical repeat, answered and counted (a local
        hit, in the metrics and the statistics), or None with nothing counted: :meth:`infer`
        then answers it. Synchronous: nothing runs between the lookup and the counting."""
        if self._memo is None:
            return None
        return self._memo.answer(model_name, version, digest, started_ns)

    async def infer(
        self,
        model_name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait | None = None,
        *,
        digest: bytes | None = None,
        memo_asked: bool = False,
    ) -> InferOutcome:
        """Answer one HTTP inference request; raises ServingError subclasses for the client.

        ``memo_asked``: the caller already hashed the body and asked :meth:`memo_answer`
        (``digest``: the request's digest, None when the memo cannot serve it); by default
        both happen here. A live memoized response answers a byte-identical repeat; anything
        else goes the shared way of :meth:`answer`. ``on_wait`` is called when the request
        starts waiting for a model execution: the transport may then watch for its client
        going away and cancel the call.
        """
        if not memo_asked:
            started_ns = time.perf_counter_ns()
            hasher = self.memo_hasher(model_name, version, header_length, directives)
            if hasher is not None:
                hasher.update(body)
                digest = hasher.digest()
                found = self.memo_answer(model_name, version, digest, started_ns)
                if found is not None:
                    return InferOutcome(found.body, found.header_length, CacheStatus.HIT_LOCAL)

        async def work(model: Model, stats: ModelStatistics, started_ns: int) -> InferOutcome:
            return await self._infer_http(
                model, stats, body, header_length, directives, on_wait, digest
            )

        return await self._accounted(model_name, version, work)

    async def answer(
        self,
        model_name: str,
        version: str | None,
        decode: Decoder,
        render: Renderer[Rendered],
        directives: CacheDirectives,
        on_wait: OnWait | None = None,
    ) -> Rendered:
        """Answer one request of any transport: ``decode`` it, compute or look up its outputs,
        ``render`` them. Raises ServingError subclasses for the client; success and failure
        are counted here (metrics and statistics), so every transport reports the same."""

        async def work(model: Model, stats: ModelStatistics, started_ns: int) -> Rendered:
            return await self._answer(model, stats, decode, render, directives, on_wait)

        return await self._accounted(model_name, version, work)

    async def _accounted(
        self,
        model_name: str,
        version: str | None,
        work: Callable[[Model, ModelStatistics, int], Awaitable[Rendered]],
    ) -> Rendered:
        """Run ``work`` for the resolved model, counting its success or failure (metrics and
        statistics) and holding the model loaded while it runs."""
        started = time.perf_counter_ns()
        model = self._repository.get(model_name, version)
        series = self._series.of(model)
        stats = self._statistics.for_version(model.name, model.version)
        self._in_flight.enter(model.name)  # no await since get(): an unload cannot slip between
        series.pending.inc()
        try:
            outcome = await work(model, stats, started)
        except ServingError as error:
            elapsed_ns = time.perf_counter_ns() - started
            self._metrics.requests.labels(model.name, model.version, str(error.status_code)).inc()
            self._metrics.inference.add(TRITON.FAILURE, model.name, model.version)
            series.request_seconds.observe(elapsed_ns / 1e9)
            stats.record_failure(elapsed_ns)
            raise
        finally:
            series.pending.dec()
            self._in_flight.leave(model.name)
        elapsed_ns = time.perf_counter_ns() - started
        series.ok.inc()
        self._metrics.inference.add(TRITON.SUCCESS, model.name, model.version)
        series.request_seconds.observe(elapsed_ns / 1e9)
        stats.record_success(elapsed_ns)
        return outcome

    async def _infer_http(
        self,
        model: Model,
        stats: ModelStatistics,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait | None,
        digest: bytes | None,
    ) -> InferOutcome:
        """The shared path of :meth:`_answer`, with a renderer that memoizes (under
        ``digest``) what it rendered from a local hit."""
        cached = model.config.response_cache or self._cache_all
        memo = self._memo if digest is not None and cached and directives.lookup else None
        reader = _RecordingReader(self._shared_memory)

        def decode(config: ModelConfig) -> InferRequest:
            return decode_request(body, header_length, config, reader)

        if memo is None or digest is None:
            return await self._answer(model, stats, decode, _render_http, directives, on_wait)
        memo_digest = digest

        def render(answer: InferAnswer) -> InferOutcome:
            outcome = _render_http(answer)
            key, request = answer.key, answer.request
            if key is not None and answer.cache_status is CacheStatus.HIT_LOCAL:
                # From the second sighting on (a one-off request costs nothing more), and never
                # for shared memory: its inputs are not in the body, its outputs go to a region.
                shared = reader.used or any(o.shared_memory is not None for o in request.outputs)
                if not shared:
                    memo.keep(memo_digest, model, key, outcome.body, outcome.header_length)
            return outcome

        return await self._answer(
            model, stats, decode, render, directives, on_wait, precompute_key=True
        )

    async def _answer(
        self,
        model: Model,
        stats: ModelStatistics,
        decode: Decoder,
        render: Renderer[Rendered],
        directives: CacheDirectives,
        on_wait: OnWait | None,
        *,
        precompute_key: bool = False,
    ) -> Rendered:
        """Decode, look up or compute, render. ``precompute_key``: compute the cache key here
        and hand it to the renderer (the memo keeps it) instead of leaving it to the cache."""
        config = model.config
        request = decode(config)
        parameters = request.keyed_parameters()
        key: CacheKey | None = None
        if precompute_key and request.use_cache:
            key = compute_key(
                model.name, model.version, model.fingerprint, request.inputs, parameters
            )
        scheduler = self._schedulers.of(model)
        scheduler.check_priority(_priority(request.parameters))
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
            key=key,
            # An inline run cannot be interrupted once started; row lookups can be.
            quick=scheduler.inline and not by_rows,
        )
        miss = _Miss()
        compute = self._compute(scheduler, request, cache_request, by_rows, on_wait, miss)
        cache_started = time.perf_counter_ns()
        outputs, status = await self._cache.get_or_compute(cache_request, directives, compute)
        cache_ns = time.perf_counter_ns() - cache_started
        if miss.row_status is not None and status is CacheStatus.MISS:
            status = miss.row_status  # the whole request missed; its rows may not have
        self._write_shared_memory(request, outputs)
        rendered = render(InferAnswer(model, request, outputs, status, key))
        _record(stats, status, cache_ns, miss.waited_ns)
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
        cache when ``by_rows``; what happened goes into ``miss``."""
        priority = _priority(request.parameters)
        timeout_us = _timeout_us(request.parameters)

        async def run(inputs: Sequence[Tensor]) -> list[Tensor]:
            started = time.perf_counter_ns()
            try:
                return await scheduler.run(inputs, priority, on_wait, timeout_us)
            finally:
                miss.waited_ns += time.perf_counter_ns() - started

        async def compute() -> list[Tensor]:
            if not by_rows:
                return await run(request.inputs)
            answer = await answer_by_rows(self._cache, cache_request, run)
            miss.row_status = answer.status
            return answer.outputs

        return compute

    def _write_shared_memory(self, request: InferRequest, outputs: Sequence[Tensor]) -> None:
        """Write the outputs the client asked for in shared memory into their regions."""
        by_name = {tensor.name: tensor for tensor in outputs}
        for wanted in request.outputs:
            window, tensor = wanted.shared_memory, by_name.get(wanted.name)
            if window is not None and tensor is not None:
                self._shared_memory.write(
                    window.region, window.offset, window.byte_size, tensor.data
                )

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


def _record(stats: ModelStatistics, status: CacheStatus, cache_ns: int, waited_ns: int) -> None:
    """Add one answered request's cache outcome to the model's statistics (its executions are
    recorded by the model's scheduler, once per execution, batched or not)."""
    if status is CacheStatus.HIT_LOCAL or status is CacheStatus.HIT_REDIS:
        stats.record_cache_hit(cache_ns)
    elif status is CacheStatus.MISS or status is CacheStatus.PARTIAL:
        stats.record_cache_miss(cache_ns - waited_ns)


def _render_http(answer: InferAnswer) -> InferOutcome:
    model = answer.model
    encoded = encode_response(
        answer.request,
        answer.outputs,
        model_name=model.name,
        model_version=model.version,
        labels=model.labels,
        batched=model.config.max_batch_size > 0,
    )
    return InferOutcome(encoded.body, encoded.header_length, answer.cache_status)
