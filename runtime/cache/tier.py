"""What every cache tier is: a place answers are kept, with one interface (:class:`Tier`).

A tier is looked up (one key, or a batched request's rows at once), inserted into, has one
entry deleted, is flushed of one model and reports its figures. What makes tiers differ is
data on the tier, not another interface: its ``name`` (its ``X-Cache: hit-<name>``, its
metrics' ``tier`` label, its key in admission's figures) and whether it is ``shared`` (every
replica sees it; its lookups wait). The tiers the server has are listed once, in the order a
request meets them, by ``factory``; everything that composes around them reads that list and
never names a tier:

- ``walk`` looks each tier up in turn (one loop, for a request and for a batch's rows),
  promotes an answer found in a later tier to the earlier ones, and inserts a computed answer
  into every tier the request uses; ``read_through`` and ``row_path`` take that walk;
- ``admission`` decides, per model and tier (by the tier's ``name``), which tiers a request
  uses, from the times that walk measures;
- ``singleflight`` and ``fleet`` sit between the in-process tiers and the shared ones: a
  lookup that must leave the process is made once per key in the process, and once per key in
  the fleet.

A tier's own faults never leave it: a lookup that cannot be answered is a miss, an insert that
cannot be made is dropped, and the tier counts and reports them. Only a flush raises
(:class:`~cachefleet.runtime.cache.errors.CacheTierError`): a flush that silently did nothing
would leave stale answers in place.

Lookups and flushes of an in-process tier (the local tier) are made at once, and must be:
they are read from gRPC's threads. A shared tier's wait for its store, so they return an
awaitable, and whoever composes tiers awaits what is awaitable (as the write-behind queue does
with its jobs). An insert and a delete never wait (an in-process tier makes them at once, a
shared tier queues them behind the response), so they are plain calls everywhere.

The answer memo in front of the tiers (rendered answers by raw request bytes, which the
transports consult) is flushed and reported with them: it is :class:`Kept`, the part of this
interface that a flush and the metrics read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.tensor import Tensor


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


class Kept(Protocol):
    """What a flush and the metrics read of anything that keeps answers: every :class:`Tier`,
    and the answer memo in front of them."""

    #: The ``tier`` label of its metrics and its name in admission's figures.
    @property
    def name(self) -> str: ...

    def flush(self, model: str) -> int | Awaitable[int]:
        """Drop every entry of ``model``; how many went (at once, or once awaited)."""
        ...

    def figures(self) -> TierFigures: ...


class Tier(Kept, Protocol):
    """A cache tier of output tensors by request key (see the module docstring)."""

    #: Whether every replica sees it: looked up after the in-process tiers, once per key in
    #: the process (single-flight), its lookups and flush awaited.
    @property
    def shared(self) -> bool: ...

    async def start(self) -> None:
        """Connect (a shared tier); nothing for an in-process one."""
        ...

    async def close(self) -> None: ...

    def asks(self, key: CacheKey) -> bool:
        """Whether a lookup of ``key`` would reach the tier now: an in-process tier always
        does; a shared one not while the breaker of ``key``'s shard is open (a True may be
        that breaker's one probe, so a lookup follows it). A tier not asked is no lookup:
        neither timed nor counted."""
        ...

    def lookup(self, key: CacheKey) -> Found | Awaitable[Found | None] | None:
        """The live answer kept under ``key``, or None (absent, expired, unreadable, or the
        tier unreachable: all misses to the caller). An in-process tier answers at once; one
        that must wait answers with an awaitable."""
        ...

    def lookup_many(
        self, keys: Sequence[CacheKey]
    ) -> list[Found | None] | Awaitable[list[Found | None]]:
        """``lookup`` of several keys (a batched request's rows) at once: one round trip per
        shard for a shared tier, which asks its breakers itself."""
        ...

    def entry(self, key: CacheKey) -> object | None:
        """The live entry's identity (what :attr:`Found.identity` was), for a liveness token's
        check; None when gone, or for a tier whose entries have none (a shared one)."""
        ...

    def insert(self, key: CacheKey, value: Sequence[Tensor], ttl_s: float) -> bool:
        """Keep ``value`` under ``key`` for ``ttl_s`` seconds (0: as long as the tier keeps
        anything); False when it is not kept (too large for the tier, or its queue full:
        counted by the tier)."""
        ...

    def delete(self, key: CacheKey) -> None:
        """Drop ``key``'s entry, if any."""
        ...


async def flushed(tier: Kept, model: str) -> int:
    """``tier.flush(model)``, awaited when the tier must wait for it."""
    removed = tier.flush(model)
    return removed if isinstance(removed, int) else await removed
