"""What every cache tier is: a place answers are kept, with five operations.

A tier is looked up, inserted into, has one entry deleted, is flushed of one model and reports
its figures. The tiers the server has are listed once, in the order a request meets them, by
``factory``; everything that composes around them reads that list and never names a tier:

- ``read_through`` looks each tier up in turn (one loop), promotes an answer found in a later
  tier to the earlier ones, and inserts a computed answer into every tier the request uses;
- ``admission`` decides, per model and tier (by the tier's ``name``), which tiers a request
  uses, from the times that loop measures;
- ``singleflight`` and ``fleet`` sit between the in-process tiers and the shared one: a lookup
  that must leave the process is made once per key in the process, and once per key in the
  fleet.

A tier's own faults never leave it: a lookup that cannot be answered is a miss, an insert that
cannot be made is dropped, and the tier counts and reports them. Only a flush raises
(:class:`~cachefleet.runtime.cache.errors.CacheTierError`): a flush that silently did nothing
would leave stale answers in place.

Lookups and flushes of an in-process tier (the memo, the local tier) are made at once, and
must be: the memo is read from gRPC's threads. The shared tier's wait for Redis, so they return
an awaitable, and whoever composes tiers awaits what is awaitable (as the write-behind queue
does with its jobs). An insert and a delete never wait (an in-process tier makes them at once,
the shared tier queues them behind the response), so they are plain calls everywhere.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

from cachefleet.runtime.tensor import Tensor

K = TypeVar("K", contravariant=True)
A = TypeVar("A", covariant=True)
V = TypeVar("V", contravariant=True)


class Found(NamedTuple):
    """An answer a tier of output tensors (local, Redis) holds."""

    outputs: list[Tensor]
    #: Seconds the entry has left where the tier knows it (a Redis entry's own expiry), so a
    #: copy promoted to an earlier tier lives no longer; None: as long as the request's TTL.
    ttl_s: float | None = None
    #: An in-process entry's identity (``LocalTier.entry``): what a liveness token names.
    identity: object | None = None


@dataclass(frozen=True, slots=True)
class TierFigures:
    """What a tier reports of itself, for the metrics and the statistics."""

    #: Entries and bytes held now; None where the tier cannot tell cheaply (a shared store).
    entries: int | None
    bytes: int | None
    hits: int
    misses: int
    #: Entries dropped to make room (not expired, flushed or deleted ones).
    evictions: int


class Tier(Protocol[K, A, V]):
    """A cache tier keyed by ``K``, answering ``A`` and storing ``V``."""

    #: The ``tier`` label of its metrics and its name in admission's figures.
    @property
    def name(self) -> str: ...

    def lookup(self, key: K) -> A | Awaitable[A | None] | None:
        """The live answer kept under ``key``, or None (absent, expired, unreadable, or the
        tier unreachable: all misses to the caller). An in-process tier answers at once; one
        that must wait answers with an awaitable."""
        ...

    def insert(self, key: K, value: V, ttl_s: float) -> bool:
        """Keep ``value`` under ``key`` for ``ttl_s`` seconds (0: as long as the tier keeps
        anything); False when it is not kept (too large for the tier, or its queue full:
        counted by the tier)."""
        ...

    def delete(self, key: K) -> None:
        """Drop ``key``'s entry, if any."""
        ...

    def flush(self, model: str) -> int | Awaitable[int]:
        """Drop every entry of ``model``; how many went (at once, or once awaited)."""
        ...

    def figures(self) -> TierFigures: ...


async def flushed(tier: Tier[Any, Any, Any], model: str) -> int:
    """``tier.flush(model)``, awaited when the tier must wait for it."""
    removed = tier.flush(model)
    return removed if isinstance(removed, int) else await removed
