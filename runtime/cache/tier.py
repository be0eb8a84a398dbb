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

Lookups and flushes may wait (a round trip to Redis), so they are coroutines; an insert and a
delete never wait (an in-process tier makes them at once, the shared tier queues them behind
the response), so they are plain calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from cachefleet.runtime.tensor import Tensor

K = TypeVar("K", contravariant=True)
A = TypeVar("A")
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
    size_bytes: int | None
    hits: int
    misses: int
    #: Entries dropped to make room (not expired, flushed or deleted ones).
    evictions: int


class Tier(Protocol[K, A, V]):
    """A cache tier keyed by ``K``, answering ``A`` and storing ``V``."""

    #: The ``tier`` label of its metrics and its name in admission's figures.
    @property
    def name(self) -> str: ...

    def asks(self, key: K) -> bool:
        """Whether a lookup of ``key`` would reach the tier now: an in-process tier always
        does; the shared tier not while the breaker of ``key``'s shard is open (a True may be
        that breaker's one probe, so :meth:`lookup` follows it). A tier not asked is no
        lookup: neither timed nor counted."""
        ...

    async def lookup(self, key: K) -> A | None:
        """The live answer kept under ``key``, or None (absent, expired, unreadable, or the
        tier unreachable: all misses to the caller)."""
        ...

    async def lookup_many(self, keys: Sequence[K]) -> list[A | None]:
        """:meth:`lookup` of several keys at once (one round trip where the tier has them)."""
        ...

    def insert(self, key: K, value: V, ttl_s: float) -> bool:
        """Keep ``value`` under ``key`` for ``ttl_s`` seconds (0: no expiry); False when it
        is not kept (too large for the tier, or its queue full: counted by the tier)."""
        ...

    def delete(self, key: K) -> None:
        """Drop ``key``'s entry, if any."""
        ...

    async def flush(self, model: str) -> int:
        """Drop every entry of ``model``; returns how many went."""
        ...

    def figures(self) -> TierFigures: ...
