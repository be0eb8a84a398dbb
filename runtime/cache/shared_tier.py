"""The shared tier: a store every replica sees, as a cache tier, with sealed entries, breakers
and write-behind.

A :class:`~cachefleet.runtime.cache.store.Store` moves bytes (Redis is one:
:class:`~cachefleet.runtime.cache.redis_tier.RedisTier` speaks its commands, pipelining, errors
translated); this module makes any store a :class:`~cachefleet.runtime.cache.tier.Tier`:

- a lookup reads the entry and checks it (``entry``: format, the request's digest, the
  fleet's MAC); one that fails is a miss, deleted and counted as ``corrupt`` or ``forged``;
- inserts and deletes go behind the response, through the write-behind queue (a full queue
  drops and counts); an insert checks at drain time that no flush of its model began since;
- one circuit breaker per shard (``asks``): while it is open the shard is not asked, and every
  fault is counted in ``cachefleet_cache_errors_total{tier=<its name>,kind}`` and told to it.

Nothing here raises to a request; a flush raises :class:`CacheTierError` (see ``tier``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.breaker import CircuitBreaker
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.entry import EntryMac, encode_entry, read_entry
from cachefleet.runtime.cache.errors import (
    CacheTierError,
    CorruptEntryError,
    ErrorKind,
    ForgedEntryError,
    is_outage,
)
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import CacheKey, KeySpace
from cachefleet.runtime.cache.local import entry_size
from cachefleet.runtime.cache.metrics import CacheMetrics
from cachefleet.runtime.cache.store import Store
from cachefleet.runtime.cache.tier import Found, TierFigures
from cachefleet.runtime.cache.writebehind import Job as WriteJob
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.tensor import Tensor

logger = logging.getLogger(__name__)


class SharedTier:
    """Entries of every replica of the fleet, in a shared store (Redis: one server, a cluster or
    Sentinel's)."""

    #: Every replica sees it: looked up once per key in the process, after the in-process
    #: tiers, and the only tier the fleet coalesces on (see ``read_through``).
    shared = True

    def __init__(
        self,
        store: Store,
        metrics: CacheMetrics,
        *,
        breakers: ShardBreakers,
        writes: WriteBehind,
        marks: FlushMarks,
        admission: AdmissionPolicy,
        keys: KeySpace | None = None,
        mac: EntryMac | None = None,
        wall_clock: Callable[[], float] = time.time,
        name: str,
    ) -> None:
        """``name``: the tier's name (its ``hit-<name>``, its metrics' ``tier`` label);
        ``keys``: the fleet's namespace; ``mac``: seals and checks entries (the fleet's
        secret), None to trust them as they are; ``wall_clock``: Unix time, for entry expiry
        (shared by every replica), injectable so expiry is tested without waiting;
        ``admission``: told what an insert costs here (its encoding and send)."""
        self.name = name
        self.store = store
        self.metrics = metrics
        self.breakers = breakers
        self.writes = writes
        self.keys = keys if keys is not None else KeySpace()
        self._marks = marks
        self._admission = admission
        self._mac = mac
        self._wall_clock = wall_clock
        self._hits = self._misses = 0
        #: Digests of entries just refused (corrupt or forged), until ``refused`` is asked.
        self._refused: set[bytes] = set()
        #: Non-outage fault kinds already logged (an OOM Redis would otherwise log per insert).
        self._reported: set[str] = set()

    async def start(self) -> None:
        await self.store.start()
        try:
            await self.store.ping()
            logger.info("cache: %s tier at %s answers", self.name, self.store.where)
        except CacheTierError as error:
            logger.warning("cache: %s not reachable yet, serving without it: %s", self.name, error)

    async def close(self) -> None:
        await self.store.close()

    # -- the tier ---------------------------------------------------------------------------

    def asks(self, key: CacheKey) -> bool:
        return self.breaker(key).allow()

    async def lookup(self, key: CacheKey) -> Found | None:
        """The entry of ``key``, checked; call after :meth:`asks` said yes."""
        breaker = self.breaker(key)
        try:
            blob = await self.store.get(self.keys.redis_key(key))
        except CacheTierError as error:
            self.fault(error, breaker)
            return None
        breaker.record_success()
        return self.accept(key, blob)

    async def lookup_many(self, keys: Sequence[CacheKey]) -> list[Found | None]:
        """The keys' entries in one round trip per shard, the shards asked concurrently (one
        in standalone and sentinel modes). A shard whose breaker is open is not asked, and a
        shard that fails costs only its own keys: they are misses, the others still hit."""
        found: list[Found | None] = [None] * len(keys)
        shards: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            shards.setdefault(self.store.shard_of(self.keys.redis_key(key)), []).append(index)
        asked = {
            shard: indices
            for shard, indices in shards.items()
            if self.breakers.of(shard).allow()  # one probe per shard
        }
        blobs = await asyncio.gather(
            *(self._shard_get_many(shard, [keys[i] for i in idx]) for shard, idx in asked.items())
        )
        for indices, values in zip(asked.values(), blobs, strict=True):
            for index, blob in zip(indices, values, strict=True):
                found[index] = self.accept(keys[index], blob)
        return found

    def entry(self, key: CacheKey) -> object | None:
        return None  # its entries live in the store: no identity here to vouch for

    def insert(self, key: CacheKey, value: Sequence[Tensor], ttl_s: float) -> bool:
        """Queue the entry's write behind the response; False (counted) when the queue is
        full."""
        return self._submit(key, self.insert_job(key, tuple(value), ttl_s), entry_size(value))

    def delete(self, key: CacheKey) -> None:
        self._submit(key, self._delete_job(key))

    async def flush(self, model: str) -> int:
        """UNLINK every entry of ``model``, then tell the other replicas (their in-process
        tiers) on the namespace's flush channel."""
        removed = await self.store.flush_model(model, self.keys)
        try:
            await self.store.publish(self.keys.flush_channel, model)
        except CacheTierError as error:
            # The store's breaker as a whole (a store that is not sharded names its one shard
            # after the tier), not any key's shard: a publish is no lookup.
            self.fault(error, self.breakers.of(self.name))
        return removed

    def figures(self) -> TierFigures:
        return TierFigures(None, None, self._hits, self._misses, 0)

    # -- entries ----------------------------------------------------------------------------

    def accept(self, key: CacheKey, blob: bytes | None) -> Found | None:
        """The outputs of ``key``'s entry ``blob``; None (and the entry deleted, counted) if it
        is corrupt or forged, or expired by its own clock."""
        if blob is None:
            self._misses += 1
            return None
        try:
            entry = read_entry(blob, key.digest, self._mac)
        except CorruptEntryError as error:
            kind: ErrorKind = "forged" if isinstance(error, ForgedEntryError) else "corrupt"
            logger.warning("cache: dropping %s entry %s: %s", kind, self.keys.redis_key(key), error)
            self.metrics.metrics.cache_errors.labels(self.name, kind).inc()
            self.delete(key)
            self._misses += 1
            if len(self._refused) >= 1024:
                self._refused.clear()  # refused by row lookups, whose keys never ask again
            self._refused.add(key.digest)
            return None
        if entry.expires_at is None:
            self._hits += 1
            return Found(entry.outputs)
        left_s = entry.expires_at - self._wall_clock()
        if left_s <= 0:
            # Past its own expiry (Redis's TTL can outlive it: a clock ahead of the writer's,
            # an entry copied by hand, PERSIST): never served. Its UNLINK is queued ahead of
            # the insert this miss will make, as a corrupt entry's is.
            self.delete(key)
            self._misses += 1
            return None
        self._hits += 1
        return Found(entry.outputs, left_s)

    def refused(self, key: CacheKey) -> bool:
        """Whether the last lookup of ``key`` found an entry and refused it (asked once)."""
        if key.digest in self._refused:
            self._refused.discard(key.digest)
            return True
        return False

    async def _shard_get_many(self, shard: str, keys: Sequence[CacheKey]) -> list[bytes | None]:
        breaker = self.breakers.of(shard)
        try:
            values = await self.store.get_many([self.keys.redis_key(key) for key in keys])
        except CacheTierError as error:
            self.fault(error, breaker)
            return [None] * len(keys)
        breaker.record_success()
        return values

    def _submit(self, key: CacheKey, job: WriteJob, size_bytes: int = 0) -> bool:
        if self.writes.submit(job, size_bytes):
            return True
        self.metrics.of(key.model, key.version).insert_dropped.inc()
        return False

    def insert_job(self, key: CacheKey, outputs: tuple[Tensor, ...], ttl_s: float) -> WriteJob:
        """The insert of one answer: it queues its SET and returns the future of its outcome, so
        that a drain of inserts needs neither a coroutine nor a task per insert. An answer whose
        model was flushed after the job was made is not written."""
        since = self._marks.now()

        def insert() -> asyncio.Future[None]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self._marks.stale(key.model, since) or not (breaker := self.breaker(key)).allow():
                done.set_result(None)
                return done
            started = time.perf_counter()
            expires_at = self._wall_clock() + ttl_s if ttl_s > 0 else None
            blob = encode_entry(key.digest, outputs, expires_at, self._mac)
            sent = self.store.set_soon(self.keys.redis_key(key), blob, ttl_s)
            admission = self._admission.of(key.model, key.version)
            admission.tier(self.name).inserted(time.perf_counter() - started)
            sent.add_done_callback(functools.partial(self._inserted, key, breaker, done))
            return done

        return insert

    def _inserted(
        self,
        key: CacheKey,
        breaker: CircuitBreaker,
        done: asyncio.Future[None],
        sent: asyncio.Future[Any],
    ) -> None:
        """Count an insert's outcome and feed the breaker, as a lookup's is."""
        if self._written(breaker, done, sent):
            self._reported.clear()
            self.metrics.of(key.model, key.version).inserts[self.name].inc()

    def _written(
        self, breaker: CircuitBreaker, done: asyncio.Future[None], sent: asyncio.Future[Any]
    ) -> bool:
        """Resolve ``done`` with the outcome of a write; whether Redis took it."""
        if sent.cancelled():
            done.cancel()
            return False
        error = sent.exception()
        if error is not None and not isinstance(error, CacheTierError):
            done.set_exception(error)  # a bug: the write-behind worker logs it
            return False
        if error is not None:
            self.fault(error, breaker)
        else:
            breaker.record_success()
        done.set_result(None)
        return error is None

    def _delete_job(self, key: CacheKey) -> WriteJob:
        """The removal of a corrupt entry. Like an insert, it queues its UNLINK when the drain
        takes it, so it stays ahead of the insert of the right answer, queued after it."""

        def delete() -> asyncio.Future[None]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if not (breaker := self.breaker(key)).allow():
                done.set_result(None)
                return done
            sent = self.store.delete_soon(self.keys.redis_key(key))
            sent.add_done_callback(functools.partial(self._written, breaker, done))
            return done

        return delete

    # -- faults -----------------------------------------------------------------------------

    def breaker(self, key: CacheKey) -> CircuitBreaker:
        """The breaker of the shard that serves ``key`` (the only one outside cluster mode)."""
        return self.breakers.of(self.store.shard_of(self.keys.redis_key(key)))

    def fault(self, error: CacheTierError, *breakers: CircuitBreaker) -> None:
        """Count a fault once, and tell the breakers of every shard the call went to."""
        kind: ErrorKind = error.kind
        self.metrics.metrics.cache_errors.labels(self.name, kind).inc()
        if is_outage(kind):
            for breaker in breakers:
                breaker.record_failure(f"{kind}: {error!s}")
        elif kind == "pool":
            logger.debug("cache: %s", str(error))  # load, not a Redis fault: counted only
        else:
            for breaker in breakers:
                breaker.record_success()  # Redis answered; it is up, just unhappy
            if kind not in self._reported:
                self._reported.add(kind)
                logger.warning("cache: %s (logged once until an insert succeeds)", str(error))
