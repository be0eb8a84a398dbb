"""The inference service: one request from body bytes to rendered response bytes.

Per request: resolve the model, decode and validate the body, ask the cache for the outputs
(computing them off the event loop on a miss), then render them as this client asked. The cache
sees only the raw output tensors, never the rendering. With a local tier, a byte-identical
repeat of a request is answered from a memo of rendered responses (see ``memo``) before any of
that, for as long as the local entry it was rendered from lives.
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
    decode_request,
    encode_response,
    model_metadata,
    repository_index,
)
from cachefleet.runtime.service.memo import ResponseMemo, request_digest
from cachefleet.runtime.service.placement import runs_inline
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
        self._plans: dict[tuple[str, str], _ModelPlan] = {}
        #: Rendered responses, only where a local tier can vouch for them (``local``, ``tiered``);
        #: an eighth of the local tier's bound, on top of it.
        self._memo = (
            ResponseMemo(settings.cache.local_size_bytes // 8)
            if settings.cache.mode in ("local", "tiered")
            else None
        )

    async def infer(
        self,
        model_name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
    ) -> InferOutcome:
        """Answer one inference request; raises CachefleetError subclasses for the client."""
        started = time.perf_counter()
        model = self._repository.get(model_name, version)
        plan = self._plan(model)
        try:
            outcome = await self._infer(plan, body, header_length, directives, started)
        except CachefleetError as error:
            self._metrics.requests.labels(model.name, model.version, str(error.status_code)).inc()
            plan.request_seconds.observe(time.perf_counter() - started)
            raise
        plan.ok.inc()
        plan.request_seconds.observe(time.perf_counter() - started)
        return outcome

    async def _infer(
        self,
        plan: _ModelPlan,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        started: float,
    ) -> InferOutcome:
        model = plan.model
        memo = self._memo if plan.cached and directives.lookup else None
        digest = b""
        if memo is not None:
            digest = request_digest(model, body, header_length)
            memoized = self._memoized(memo, digest, model, started)
            if memoized is not None:
                return memoized
        request = decode_request(body, header_length, model.config)
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

        async def compute() -> list[Tensor]:
            return await self._run(plan, request.inputs)

        outputs, status = await self._cache.get_or_compute(
            cache_request, directives if request.use_cache else _NO_CACHE, compute
        )
        encoded = encode_response(
            request,
            outputs,
            model_name=model.name,
            model_version=model.version,
            labels=model.labels,
            batched=plan.batched,
        )
        if memo is not None and key is not None and status is CacheStatus.HIT_LOCAL:
            # Memoized from the second sighting on: a one-off request (a miss) costs nothing more.
            entry = self._cache.local_entry(key)
            if entry is not None:
                memo.put(digest, model, key, entry, encoded.body, encoded.header_length)
        return InferOutcome(encoded.body, encoded.header_length, status)

    def _memoized(
        self, memo: ResponseMemo, digest: bytes, model: Model, started: float
    ) -> InferOutcome | None:
        """The memoized response, if its model and its local-tier entry are still the live ones
        (the cache then counts the local hit); a stale one is dropped."""
        found = memo.get(digest)
        if found is None:
            return None
        if found.model is model and self._cache.confirm_local_hit(found.key, found.entry, started):
            return InferOutcome(found.body, found.header_length, CacheStatus.HIT_LOCAL)
        memo.discard(digest)
        return None

    def prepare(self) -> None:
        """Work out every loaded model's plan now, trial runs included (blocking: call it off
        the event loop, before serving), so that no request pays for it."""
        for entry in self._repository.index():
            if entry.state == "READY":
                model = self._repository.get(entry.name, entry.version)
                self._plans[(model.name, model.version)] = self._new_plan(
                    model, inline=runs_inline(model)
                )

    async def _run(self, plan: _ModelPlan, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Run the model (inline or in the bounded executor, as its plan says); failures other
        than CachefleetErrors become ModelExecutionError."""
        model = plan.model
        started = time.perf_counter()
        try:
            if plan.inline:
                outputs = model.run(inputs)
            else:
                loop = asyncio.get_running_loop()
                outputs = await loop.run_in_executor(self._executor, model.run, inputs)
        except CachefleetError:
            raise
        except Exception as error:
            raise ModelExecutionError(
                f"model {model.name!r} version {model.version} failed: {error}"
            ) from error
        plan.inference_seconds.observe(time.perf_counter() - started)
        return outputs

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

    async def flush(self, name: str) -> int:
        """Remove a loaded model's entries from every cache tier; returns how many went."""
        self._repository.versions(name)
        return await self._cache.flush(name)
