"""The inference service: one request from body bytes to rendered response bytes.

Per request: resolve the model, decode and validate the body, ask the cache for the outputs
(on a miss, the model's scheduler runs them off the event loop, batched with other misses when
the model asks for dynamic batching), then render them as this client asked. The cache
sees only the raw output tensors, never the rendering.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter, Histogram

from cachefleet.runtime.cache.api import (
    CacheDirectives,
    CacheRequest,
    CacheStatus,
    Compute,
    ResponseCache,
)
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import BadRequestError, CachefleetError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.metrics import TritonInferenceCounters as TRITON
from cachefleet.runtime.models.types import Model, ModelRepository
from cachefleet.runtime.protocol import (
    InferRequest,
    decode_request,
    encode_response,
    model_metadata,
    repository_index,
)
from cachefleet.runtime.service import rows
from cachefleet.runtime.service.row_cache import answer_by_rows
from cachefleet.runtime.service.scheduler import OnWait, Schedulers
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
class _ModelSeries:
    request_seconds: Histogram
    ok: Counter


class InferenceService:
    """Serves inference and metadata for a loaded repository through a response cache."""

    def __init__(
        self,
        repository: ModelRepository,
        cache: ResponseCache,
        metrics: RuntimeMetrics,
        settings: RuntimeSettings,
        executor: Executor,
    ) -> None:
        self._repository = repository
        self._cache = cache
        self._metrics = metrics
        self._executor = executor
        self._cache_all = settings.models.cache_all_models
        self._row_cache_models = frozenset(settings.models.row_cache_models)
        self._default_ttl_s = settings.cache.ttl_s
        self._model_series: dict[tuple[str, str], _ModelSeries] = {}
        self._schedulers = Schedulers(executor, metrics)

    async def close(self) -> None:
        """Stop the models' batchers (executions already running finish)."""
        await self._schedulers.close()

    async def infer(
        self,
        model_name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait | None = None,
    ) -> InferOutcome:
        """Answer one inference request; raises CachefleetError subclasses for the client.

        ``on_wait`` is called when the request starts waiting for a model execution: the
        transport may then watch for its client going away and cancel the call.
        """
        started = time.perf_counter()
        model = self._repository.get(model_name, version)
        series = self._series(model)
        try:
            outcome = await self._infer(model, body, header_length, directives, on_wait)
        except CachefleetError as error:
            self._metrics.requests.labels(model.name, model.version, str(error.status_code)).inc()
            self._metrics.inference.add(TRITON.FAILURE, model.name, model.version)
            series.request_seconds.observe(time.perf_counter() - started)
            raise
        series.ok.inc()
        self._metrics.inference.add(TRITON.SUCCESS, model.name, model.version)
        series.request_seconds.observe(time.perf_counter() - started)
        return outcome

    async def _infer(
        self,
        model: Model,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait | None,
    ) -> InferOutcome:
        config = model.config
        request = decode_request(body, header_length, config)
        cache_request = CacheRequest(
            model=model.name,
            version=model.version,
            inputs=request.inputs,
            parameters=request.keyed_parameters(),
            enabled=config.response_cache or self._cache_all,
            ttl_s=self._default_ttl_s if config.cache_ttl_s is None else config.cache_ttl_s,
        )

        directives = directives if request.use_cache else _NO_CACHE
        row_status: list[CacheStatus] = []
        compute = self._compute(model, request, cache_request, directives, on_wait, row_status)
        outputs, status = await self._cache.get_or_compute(cache_request, directives, compute)
        if row_status and status is CacheStatus.MISS:
            status = row_status[0]  # the whole request missed; its rows may not have
        encoded = encode_response(
            request,
            outputs,
            model_name=model.name,
            model_version=model.version,
            labels=model.labels,
            batched=config.max_batch_size > 0,
        )
        return InferOutcome(encoded.body, encoded.header_length, status)

    def _compute(
        self,
        model: Model,
        request: InferRequest,
        cache_request: CacheRequest,
        directives: CacheDirectives,
        on_wait: OnWait | None,
        row_status: list[CacheStatus],
    ) -> Compute:
        """How a miss is computed: through the model's scheduler, row by row through the row
        cache when the model has it (its status then goes into ``row_status``)."""
        priority = _priority(request.parameters)
        scheduler = self._schedulers.of(model)

        async def run(inputs: Sequence[Tensor]) -> list[Tensor]:
            return await scheduler.run(inputs, priority, on_wait)

        by_rows = (
            (scheduler.policy.row_cache or model.name in self._row_cache_models)
            and model.config.max_batch_size > 0
            and cache_request.enabled
            and directives.lookup
            and rows.batch_rows(request.inputs) > 1
        )

        async def compute() -> list[Tensor]:
            if not by_rows:
                return await run(request.inputs)
            answer = await answer_by_rows(self._cache, cache_request, run)
            row_status.append(answer.status)
            return answer.outputs

        return compute

    def _series(self, model: Model) -> _ModelSeries:
        """The model's labelled metric children, looked up once (``labels()`` takes a lock)."""
        key = (model.name, model.version)
        series = self._model_series.get(key)
        if series is None:
            metrics = self._metrics
            series = _ModelSeries(
                request_seconds=metrics.request_seconds.labels(*key),
                ok=metrics.requests.labels(*key, "200"),
            )
            self._model_series[key] = series
        return series

    def batch_stats(self, name: str, version: str | None) -> list[dict[str, Any]]:
        """Triton's ``batch_stats`` of a model version (statistics extension): executions per
        batch size, with their time in the model (input and output handling included)."""
        model = self._repository.get(name, version)
        scheduler = self._schedulers.get(model.name, model.version)
        if scheduler is None:
            return []
        return [
            {
                "batch_size": size,
                "compute_input": {"count": stats.count, "ns": 0},
                "compute_infer": {"count": stats.count, "ns": stats.compute_ns},
                "compute_output": {"count": stats.count, "ns": 0},
            }
            for size, stats in sorted(scheduler.batch_stats.items())
        ]

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

    async def flush(self, name: str) -> int:
        """Remove a loaded model's entries from every cache tier; returns how many went."""
        self._repository.versions(name)
        return await self._cache.flush(name)


def _priority(parameters: Mapping[str, Any]) -> int:
    """The request parameter ``priority`` (0, the default level, when absent)."""
    value = parameters.get("priority", 0)
    if type(value) is not int or value < 0:
        raise BadRequestError(f"parameter 'priority' must be a non-negative integer, not {value!r}")
    return value
