"""The inference service: one request from body bytes to rendered response bytes.

Per request: resolve the model, decode and validate the body, ask the cache for the outputs
(computing them off the event loop on a miss), then render them as this client asked. The cache
sees only the raw output tensors, never the rendering.
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
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import ModelExecutionError, NotReadyError, ServingError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.types import Model, ModelRepository
from cachefleet.runtime.protocol import (
    decode_request,
    encode_response,
    model_metadata,
    repository_index,
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
class _ModelSeries:
    request_seconds: Histogram
    inference_seconds: Histogram
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
        self._default_ttl_s = settings.cache.ttl_s
        self._model_series: dict[tuple[str, str], _ModelSeries] = {}

    async def infer(
        self,
        model_name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
    ) -> InferOutcome:
        """Answer one inference request; raises ServingError subclasses for the client."""
        started = time.perf_counter()
        model = self._repository.get(model_name, version)
        series = self._series(model)
        try:
            outcome = await self._infer(model, body, header_length, directives)
        except ServingError as error:
            self._metrics.requests.labels(model.name, model.version, str(error.status_code)).inc()
            series.request_seconds.observe(time.perf_counter() - started)
            raise
        series.ok.inc()
        series.request_seconds.observe(time.perf_counter() - started)
        return outcome

    async def _infer(
        self, model: Model, body: bytes, header_length: int | None, directives: CacheDirectives
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

        async def compute() -> list[Tensor]:
            return await self._run(model, request.inputs)

        outputs, status = await self._cache.get_or_compute(
            cache_request, directives if request.use_cache else _NO_CACHE, compute
        )
        encoded = encode_response(
            request,
            outputs,
            model_name=model.name,
            model_version=model.version,
            labels=model.labels,
            batched=config.max_batch_size > 0,
        )
        return InferOutcome(encoded.body, encoded.header_length, status)

    async def _run(self, model: Model, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Run the model in the bounded executor; other failures become ModelExecutionError."""
        started = time.perf_counter()
        loop = asyncio.get_running_loop()
        try:
            outputs = await loop.run_in_executor(self._executor, model.run, inputs)
        except ServingError:
            raise
        except Exception as error:
            raise ModelExecutionError(
                f"model {model.name!r} version {model.version} failed: {error}"
            ) from error
        self._series(model).inference_seconds.observe(time.perf_counter() - started)
        return outputs

    def _series(self, model: Model) -> _ModelSeries:
        """The model's labelled metric children, looked up once (``labels()`` takes a lock)."""
        key = (model.name, model.version)
        series = self._model_series.get(key)
        if series is None:
            metrics = self._metrics
            series = _ModelSeries(
                request_seconds=metrics.request_seconds.labels(*key),
                inference_seconds=metrics.inference_seconds.labels(*key),
                ok=metrics.requests.labels(*key, "200"),
            )
            self._model_series[key] = series
        return series

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
        """Remove a loaded model's entries from every cache tier; returns how many went.

        A tier that cannot be flushed is a 503: unlike a lookup, a flush that silently did
        nothing would leave stale answers in place.
        """
        self._repository.versions(name)
        try:
            return await self._cache.flush(name)
        except CacheTierError as error:
            raise NotReadyError(f"cache flush of model {name!r} failed: {error}") from error
