"""The seam between the inference service and the response cache.

The service hands the cache a request's identity and a way to compute the answer; the cache
decides whether to look up, coalesce, compute and insert. The service never learns about tiers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from cachefleet.runtime.tensor import Tensor

Compute = Callable[[], Awaitable[list[Tensor]]]
#: A row's cached outputs and the tier that held them (HIT_LOCAL or HIT_REDIS).
RowHit = tuple[list[Tensor], "CacheStatus"]


class CacheStatus(StrEnum):
    """The value of the ``X-Cache`` response header."""

    HIT_LOCAL = "hit-local"
    HIT_REDIS = "hit-redis"
    MISS = "miss"
    BYPASS = "bypass"
    #: Some rows of a batched request came from the row cache, the others ran.
    PARTIAL = "partial"


@dataclass(frozen=True, slots=True)
class CacheDirectives:
    """What the client allowed: ``no-cache`` skips the lookup, ``no-store`` skips both."""

    lookup: bool = True
    store: bool = True


@dataclass(frozen=True, slots=True)
class CacheRequest:
    """Everything that identifies a request's computed outputs."""

    model: str
    version: str
    inputs: Sequence[Tensor]
    #: Request-level parameters; the key keeps those that can change the computed tensors.
    parameters: Mapping[str, Any]
    #: Whether the model's config enables caching (or the server caches every model).
    enabled: bool
    ttl_s: float


class ResponseCache(Protocol):
    """A response cache; implementations never raise for cache faults, only for compute's."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> tuple[list[Tensor], CacheStatus]: ...

    async def flush(self, model: str) -> int:
        """Remove every entry of ``model`` from every tier; returns how many were removed."""
        ...

    async def get_rows(self, rows: Sequence[CacheRequest]) -> list[RowHit | None]:
        """Look up one-row requests together (the rows of one batched request); None for each
        row not held. Never raises: a tier fault makes its rows misses."""
        ...

    def put_rows(
        self, rows: Sequence[CacheRequest], outputs: Sequence[Sequence[Tensor]], since: float
    ) -> None:
        """Insert computed rows (as ``get_or_compute`` inserts answers); ``since`` is the
        ``time.monotonic()`` when their computation started (a flush after it voids them)."""
        ...


class NullCache:
    """``--cache none``: always computes, and says so."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> tuple[list[Tensor], CacheStatus]:
        return await compute(), CacheStatus.BYPASS

    async def flush(self, model: str) -> int:
        return 0

    async def get_rows(self, rows: Sequence[CacheRequest]) -> list[RowHit | None]:
        return [None] * len(rows)

    def put_rows(
        self, rows: Sequence[CacheRequest], outputs: Sequence[Sequence[Tensor]], since: float
    ) -> None:
        return None
