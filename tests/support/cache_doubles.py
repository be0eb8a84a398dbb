"""Test doubles for the cache's unit tests: a stand-in model, requests, settings, metric reads.

The model is a double on purpose: these tests are about what the cache does around a compute
call (how often it runs, what is stored when it fails), which a real model cannot be told to do.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus
from cachefleet.runtime.cache.key import CacheKey, KeySpace, compute_key
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

if TYPE_CHECKING:  # redis-py is imported only by the tests that use Redis
    from cachefleet.runtime.cache.redis_tier import RedisTier
    from cachefleet.runtime.cache.shared_tier import SharedTier

DEFAULT = CacheDirectives()


def settings(mode: str, redis_url: str | None = None, **cache: Any) -> RuntimeSettings:
    return RuntimeSettings.model_validate(
        {"cache": {"mode": mode, **cache}, "redis": {"url": redis_url, "breaker_reset_s": 0.2}}
    )


#: The fingerprint of the stand-in model's files (any hex digest will do).
FINGERPRINT = "ab" * 32


def request(
    value: int, *, model: str = "simple", enabled: bool = True, fingerprint: str = FINGERPRINT
) -> CacheRequest:
    tensor = Tensor.from_numpy("INPUT0", np.full((1, 16), value, dtype=np.int32))
    return CacheRequest(
        model, "1", [tensor], {}, enabled=enabled, ttl_s=60, fingerprint=fingerprint
    )


def key_of(req: CacheRequest) -> CacheKey:
    return compute_key(req.model, req.version, req.fingerprint, req.inputs, req.parameters)


def redis_key(req: CacheRequest, keys: KeySpace | None = None) -> str:
    """The Redis key of ``req`` in ``keys`` (the default namespace when None)."""
    return (keys or KeySpace()).redis_key(key_of(req))


def local_tier(cache: ReadThroughCache) -> LocalTier:
    """The cache's local tier (in ``local`` and ``tiered`` modes)."""
    (tier,) = cache.near
    assert isinstance(tier, LocalTier)
    return tier


def redis_store(shared: SharedTier) -> RedisTier:
    """The shared tier's store, which is Redis in ``redis`` and ``tiered`` modes."""
    from cachefleet.runtime.cache.redis_tier import RedisTier

    assert isinstance(shared.store, RedisTier)
    return shared.store


def shared_tier(cache: ReadThroughCache) -> SharedTier:
    """The cache's shared tier (in ``redis`` and ``tiered`` modes)."""
    from cachefleet.runtime.cache.shared_tier import SharedTier

    (shared,) = cache.shared
    assert isinstance(shared, SharedTier)
    return shared


class Model:
    """A stand-in for the model backend: doubles its input and counts its runs."""

    def __init__(self, delay_s: float = 0.0, fail: bool = False) -> None:
        self.runs = 0
        self.delay_s = delay_s
        self.fail = fail

    def for_request(self, req: CacheRequest) -> Callable[[], Any]:
        async def compute() -> list[Tensor]:
            self.runs += 1
            if self.delay_s:
                await asyncio.sleep(self.delay_s)
            if self.fail:
                raise RuntimeError("model failed")
            doubled = req.inputs[0].to_numpy() * 2
            return [Tensor.from_numpy("OUTPUT0", doubled)]

        return compute


async def ask(
    cache: ReadThroughCache, req: CacheRequest, model: Model, directives: CacheDirectives = DEFAULT
) -> tuple[list[Tensor], CacheStatus]:
    outputs, status, _ = await cache.get_or_compute(req, directives, model.for_request(req))
    return outputs, status


def metric(metrics: RuntimeMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0
