"""The inference service: one request from body bytes to rendered response bytes.

Per request: resolve the model, decode and validate the body, ask the cache for the outputs
(computing them off the event loop on a miss, or on it for models quick enough: see
``placement``), then render them as this client asked. The cache sees only the raw output
tensors, never the rendering. With a local tier, a byte-identical repeat of a request is
answered from a memo of rendered responses (see ``memo``) before any of that, for as long as
the local entry it was rendered from lives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus, ResponseCache
from cachefleet.runtime.cache.key import CacheKey, compute_key
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import CachefleetError, ModelExecutionError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.types import Model, ModelRepository
from cachefleet.runtime.protocol import (
    InferRequest,
    decode_request,
    encode_response,
    model_metadata,
    repository_index,
)
from cachefleet.runtime.service.in_flight import InFlight
from cachefleet.runtime.service.memo import ResponseMemo, request_digest
from cachefleet.runtime.service.placement import runs_inline
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry
from cachefleet.runtime.service.statistics import (
    ExecutionTimes,
    ModelStatistics,
    StatisticsRegistry,
)
from cachefleet.runtime.tensor import Tensor

_NO_CACHE = CacheDirectives(lookup=False, store=False)


@dataclass(frozen=True, slots=True)
class InferOutcome:
    """A rendered response and how the cache answered it."""

    body: bytes
    #: JSON header length when binary outputs follow the header, else None.
    header_length: int | None
    cache_status: CacheStatus


@dataclass(frozen=True, slots=True)
class _RunTimes:
    """How long one model run waited for a model thread, and how long it ran."""

    queue_ns: int
    infer_ns: int


@dataclass(frozen=True, slots=True)
class _ModelPlan:
    """What every request of one loaded model needs, worked out once per model object."""

    model: Model
    request_seconds: Histogram
    inference_seconds: Histogram
    ok: Counter
    #: The model's config enables caching (or the server caches every model).
    cached: bool
    ttl_s: float
    batched: bool
    #: Quick enough to run on the event loop instead of the executor (see ``placement``).
    inline: bool = False


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
        self._default_ttl_s = settings.cache.ttl_s
        self._plans: dict[tuple[str, str], _ModelPlan] = {}
        #: Rendered responses, only where a local tier can vouch for them (``local``, ``tiered``);
        #: an eighth of the local tier's bound, on top of it.
        self._memo = (
            ResponseMemo(settings.cache.local_size_bytes // 8)
            if settings.cache.mode in ("local", "tiered")
            else None
        )
        self._statistics = statistics if statistics is not None else StatisticsRegistry()
        self._in_flight = in_flight if in_flight is not None else InFlight()
        self._shared_memory = shared_memory if shared_memory is not None else SharedMemoryRegistry()

    async def infer(
        self,
        model_name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
    ) -> InferOutcome:
        """Answer one inference request; raises CachefleetError subclasses for the client."""
        started = time.perf_counter_ns()
        model = self._repository.get(model_name, version)
        plan = self._plan(model)
        stats = self._statistics.for_version(model.name, model.version)
        self._in_flight.enter(model.name)  # no await since get(): an unload cannot slip between
        try:
            outcome = await self._infer(plan, stats, body, header_length, directives, started)
        except CachefleetError as error:
            elapsed_ns = time.perf_counter_ns() - started
            self._metrics.requests.labels(model.name, model.version, str(error.status_code)).inc()
            plan.request_seconds.observe(elapsed_ns / 1e9)
            stats.record_failure(elapsed_ns)
            raise
        finally:
            self._in_flight.leave(model.name)
        elapsed_ns = time.perf_counter_ns() - started
        plan.ok.inc()
        plan.request_seconds.observe(elapsed_ns / 1e9)
        stats.record_success(elapsed_ns)
        return outcome

    async def _infer(
        self,
        plan: _ModelPlan,
        stats: ModelStatistics,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        started_ns: int,
    ) -> InferOutcome:
        model = plan.model
        memo = self._memo if plan.cached and directives.lookup else None
        digest = b""
        if memo is not None:
            digest = request_digest(model, body, header_length)
            memoized = self._memoized(memo, digest, model, stats, started_ns)
            if memoized is not None:
                return memoized
        decode_started = time.perf_counter_ns()
        reader = _RecordingReader(self._shared_memory)
        request = decode_request(body, header_length, model.config, reader)
        decode_ns = time.perf_counter_ns() - decode_started
        parameters = request.keyed_parameters()
        key: CacheKey | None = None
        if memo is not None and request.use_cache:
            key = compute_key(model.name, model.version, request.inputs, parameters)
        cache_request = CacheRequest(
            model=model.name,
            version=model.version,
            inputs=request.inputs,
            parameters=parameters,
            enabled=plan.cached,
            ttl_s=plan.ttl_s,
            key=key,
            quick=plan.inline,
        )

        run: list[_RunTimes] = []

        async def compute() -> list[Tensor]:
            outputs, times = await self._run(plan, request.inputs)
            run.append(times)
            return outputs

        cache_started = time.perf_counter_ns()
        outputs, status = await self._cache.get_or_compute(
            cache_request, directives if request.use_cache else _NO_CACHE, compute
        )
        cache_ns = time.perf_counter_ns() - cache_started
        encode_started = time.perf_counter_ns()
        self._write_shared_memory(request, outputs)
        encoded = encode_response(
            request,
            outputs,
            model_name=model.name,
            model_version=model.version,
            labels=model.labels,
            batched=plan.batched,
        )
        encode_ns = time.perf_counter_ns() - encode_started
        rows = request.inputs[0].shape[0] if plan.batched else 1
        _record(stats, status, cache_ns, run[0] if run else None, rows, decode_ns, encode_ns)
        if memo is not None and key is not None and status is CacheStatus.HIT_LOCAL:
            # From the second sighting on (a one-off request costs nothing more), and never for
            # shared memory: its inputs are not in the body, its outputs go to a region.
            shared = reader.used or any(o.shared_memory is not None for o in request.outputs)
            entry = None if shared else self._cache.local_entry(key)
            if entry is not None:
                memo.put(digest, model, key, entry, encoded.body, encoded.header_length)
        return InferOutcome(encoded.body, encoded.header_length, status)

    def _memoized(
        self,
        memo: ResponseMemo,
        digest: bytes,
        model: Model,
        stats: ModelStatistics,
        started_ns: int,
    ) -> InferOutcome | None:
        """The memoized response, if its model and its local-tier entry are still the live ones
        (the cache then counts the local hit, and so do the statistics); a stale one is dropped."""
        found = memo.get(digest)
        if found is None:
            return None
        started = started_ns / 1e9
        if found.model is model and self._cache.confirm_local_hit(found.key, found.entry, started):
            stats.record_cache_hit(time.perf_counter_ns() - started_ns)
            return InferOutcome(found.body, found.header_length, CacheStatus.HIT_LOCAL)
        memo.discard(digest)
        return None

    def _write_shared_memory(self, request: InferRequest, outputs: Sequence[Tensor]) -> None:
        """Write the outputs the client asked for in shared memory into their regions."""
        by_name = {tensor.name: tensor for tensor in outputs}
        for wanted in request.outputs:
            window, tensor = wanted.shared_memory, by_name.get(wanted.name)
            if window is not None and tensor is not None:
                self._shared_memory.write(
                    window.region, window.offset, window.byte_size, tensor.data
                )

    def prepare(self) -> None:
        """Work out every loaded model's plan now, trial runs included (blocking: call it off
        the event loop, before serving), so that no request pays for it."""
        for entry in self._repository.index():
            if entry.state == "READY":
                model = self._repository.get(entry.name, entry.version)
                self._plans[(model.name, model.version)] = self._new_plan(
                    model, inline=runs_inline(model)
                )

    async def _run(
        self, plan: _ModelPlan, inputs: Sequence[Tensor]
    ) -> tuple[list[Tensor], _RunTimes]:
        """Run the model (inline or in the bounded executor, as its plan says); failures other
        than CachefleetErrors become ModelExecutionError."""
        model = plan.model
        submitted = time.perf_counter_ns()

        def timed_run() -> tuple[list[Tensor], int]:
            started = time.perf_counter_ns()
            return model.run(inputs), started

        try:
            if plan.inline:
                outputs, started = timed_run()
            else:
                loop = asyncio.get_running_loop()
                outputs, started = await loop.run_in_executor(self._executor, timed_run)
        except CachefleetError:
            raise
        except Exception as error:
            raise ModelExecutionError(
                f"model {model.name!r} version {model.version} failed: {error}"
            ) from error
        finished = time.perf_counter_ns()
        plan.inference_seconds.observe((finished - submitted) / 1e9)
        return outputs, _RunTimes(queue_ns=started - submitted, infer_ns=finished - started)

    def _plan(self, model: Model) -> _ModelPlan:
        """The model's per-request constants and labelled metric children, made once per
        loaded model object (``labels()`` takes a lock; a reloaded model gets a new plan)."""
        key = (model.name, model.version)
        plan = self._plans.get(key)
        if plan is None or plan.model is not model:
            plan = self._new_plan(model, inline=False)  # not trialled: the executor is safe
            self._plans[key] = plan
        return plan

    def _new_plan(self, model: Model, *, inline: bool) -> _ModelPlan:
        metrics, config, key = self._metrics, model.config, (model.name, model.version)
        return _ModelPlan(
            model=model,
            request_seconds=metrics.request_seconds.labels(*key),
            inference_seconds=metrics.inference_seconds.labels(*key),
            ok=metrics.requests.labels(*key, "200"),
            cached=config.response_cache or self._cache_all,
            ttl_s=self._default_ttl_s if config.cache_ttl_s is None else config.cache_ttl_s,
            batched=config.max_batch_size > 0,
            inline=inline,
        )

    def model_metadata(self, name: str, version: str | None) -> dict[str, Any]:
        model = self._repository.get(name, version)
        versions = [version] if version is not None else self._repository.versions(name)
        return model_metadata(model, versions)

    def model_config(self, name: str, version: str | None) -> dict[str, Any]:
        return dict(self._repository.get(name, version).config.document)

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
        """Remove a loaded model's entries from every cache tier; returns how many went."""
        self._repository.versions(name)
        return await self._cache.flush(name)


def _record(
    stats: ModelStatistics,
    status: CacheStatus,
    cache_ns: int,
    run: _RunTimes | None,
    rows: int,
    decode_ns: int,
    encode_ns: int,
) -> None:
    """Add one answered request's cache outcome and, if it ran the model (not a hit, not a
    follower of an identical request in flight), its execution to the model's statistics."""
    run_ns = 0
    if run is not None:
        run_ns = run.queue_ns + run.infer_ns
        stats.record_execution(
            rows, ExecutionTimes(run.queue_ns, decode_ns, run.infer_ns, encode_ns)
        )
    if status is CacheStatus.HIT_LOCAL or status is CacheStatus.HIT_REDIS:
        stats.record_cache_hit(cache_ns)
    elif status is CacheStatus.MISS:
        stats.record_cache_miss(cache_ns - run_ns)
