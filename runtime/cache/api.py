"""The seam between the inference service and the response cache.

The service hands the cache a request's identity and a way to compute the answer; the cache
decides whether to look up, coalesce, compute and insert. The service never learns about tiers.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Protocol

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.tensor import Tensor

#: Computes a request's outputs. One that cannot be interrupted once started (a model run on
#: the event loop) comes as a :class:`~cachefleet.runtime.cache.completion.RunsToCompletion`:
#: a miss is then computed in the caller's own task instead of a task of its own.
Compute = Callable[[], Awaitable[list[Tensor]]]
#: A row's outputs and how it was answered (a tier's hit status, or MISS).
RowHit = tuple[list[Tensor], "CacheStatus"]
#: Computes the rows at the given indices (ascending); returns their outputs in the same order.
RowsCompute = Callable[[Sequence[int]], Awaitable[Sequence[Sequence[Tensor]]]]


class CacheStatus(str):
    """The value of the ``X-Cache`` response header: ``miss``, ``bypass``, ``partial``, or
    ``hit-<tier>`` for an answer a tier held, named by the tier's ``name``.

    Statuses are data, not a fixed list: every tier's hit status is made by :meth:`hit` from
    its name, so a new tier needs no member here, and whoever reads a status (the request
    ledger, the row cache, tracing) asks :attr:`tier` rather than comparing with ``hit-local``
    and ``hit-redis``. Each value exists once (made through :meth:`of`), so statuses may be
    compared with ``is``. The shipped values are a contract: ``hit-local | hit-redis | miss |
    bypass | partial``.
    """

    __slots__ = ("rank", "tier")

    tier: str | None
    #: Where a hit's tier comes in the order statuses were made: the tiers are made in the
    #: order a request meets them, so a larger rank is a farther tier (what a batch whose rows
    #: came from several tiers reports).
    rank: int

    _made: ClassVar[dict[str, CacheStatus]] = {}

    HIT_LOCAL: ClassVar[CacheStatus]
    HIT_REDIS: ClassVar[CacheStatus]
    MISS: ClassVar[CacheStatus]
    BYPASS: ClassVar[CacheStatus]
    #: Some rows of a batched request came from the row cache, the others ran.
    PARTIAL: ClassVar[CacheStatus]

    @classmethod
    def of(cls, value: str) -> CacheStatus:
        """The one status spelt ``value``."""
        made = cls._made.get(value)
        if made is None:
            made = str.__new__(cls, value)
            made.tier = value[len(HIT_PREFIX) :] if value.startswith(HIT_PREFIX) else None
            made.rank = sum(1 for each in cls._made.values() if each.tier is not None)
            cls._made[value] = made
        return made

    @classmethod
    def hit(cls, tier: str) -> CacheStatus:
        """The status of an answer the tier named ``tier`` held."""
        return cls.of(HIT_PREFIX + tier)

    @property
    def value(self) -> str:
        """The header's value as a plain string (as an enum member's ``value`` was)."""
        return str.__str__(self)

    @property
    def is_hit(self) -> bool:
        return self.tier is not None

    def __repr__(self) -> str:
        return f"CacheStatus({str.__repr__(self)})"


#: What every hit status starts with; the rest is the tier's name.
HIT_PREFIX = "hit-"
CacheStatus.HIT_LOCAL = CacheStatus.hit("local")
CacheStatus.HIT_REDIS = CacheStatus.hit("redis")
CacheStatus.MISS = CacheStatus.of("miss")
CacheStatus.BYPASS = CacheStatus.of("bypass")
CacheStatus.PARTIAL = CacheStatus.of("partial")


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
    #: The model version's fingerprint (its effective config and files): keyed with the rest.
    fingerprint: str


#: Checks that a local entry (key, identity) still lives and counts its hit (see below).
Confirm = Callable[[CacheKey, object, int], int | None]


class LocalEntryToken:
    """Proof that an answer came from a local-tier entry, good for as long as that entry lives.

    Handed out with every local hit (:attr:`CacheAnswer.local_entry`), so that a layer above
    may keep something derived from the answer (a rendered response) exactly as long as the
    entry itself: a flush, an expiry, an eviction or a replacement ends it. It names the entry
    by key and a bare identity, never by its tensors, which an eviction must free.
    """

    __slots__ = ("_confirm", "_identity", "_key")

    def __init__(self, key: CacheKey, identity: object, confirm: Confirm) -> None:
        self._key = key
        self._identity = identity
        self._confirm = confirm

    def held_bytes(self) -> int:
        """The bytes this token keeps alive of its own (itself, its key and digest, the bare
        identity), for a layer that charges what it keeps (the answer memo). The confirm
        callable is the tier's, shared by every token."""
        key = self._key
        return (
            sys.getsizeof(self)
            + sys.getsizeof(key)
            + sys.getsizeof(key.digest)
            + sys.getsizeof(self._identity)
        )

    def confirm(self, started_ns: int) -> int | None:
        """If the entry still lives, count a local hit as a lookup does (its time from
        ``started_ns``, a ``time.perf_counter_ns()`` value) and return the
        ``perf_counter_ns()`` it was confirmed at (one clock read serves the caller too);
        else None, nothing counted."""
        return self._confirm(self._key, self._identity, started_ns)


class CacheAnswer(NamedTuple):
    """A request's outputs and how the cache answered it."""

    outputs: list[Tensor]
    status: CacheStatus
    #: For a local hit, the entry's liveness token; else None.
    local_entry: LocalEntryToken | None = None


class ResponseCache(Protocol):
    """A response cache; implementations never raise for cache faults, only for compute's."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> CacheAnswer: ...

    async def flush(self, model: str) -> int:
        """Remove every entry of ``model`` from every tier; returns how many were removed."""
        ...

    async def get_rows_or_compute(
        self, rows: Sequence[CacheRequest], compute: RowsCompute
    ) -> list[RowHit]:
        """Each one-row request's outputs (the rows of one batched request) and how it was
        answered: a tier's hit status (its tiers looked up together), MISS when
        ``compute`` ran it (or, for a row another request was computing, that request's
        status). ``compute`` gets the indices of the rows no tier held and nobody else is
        computing, and returns their outputs in that order; they are inserted as
        ``get_or_compute`` inserts answers. Tier faults make misses; only ``compute``'s
        exceptions propagate."""


class NullCache:
    """``--cache none``: always computes, and says so."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> CacheAnswer:
        return CacheAnswer(await compute(), CacheStatus.BYPASS)

    async def flush(self, model: str) -> int:
        return 0

    async def get_rows_or_compute(
        self, rows: Sequence[CacheRequest], compute: RowsCompute
    ) -> list[RowHit]:
        computed = await compute(list(range(len(rows))))
        return [(list(outputs), CacheStatus.MISS) for outputs in computed]
