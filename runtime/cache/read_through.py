"""The read-through response cache: local tier, then Redis, then the model; writes behind.

One class serves ``local``, ``redis`` and ``tiered`` (a missing tier is simply skipped), so it is
named for what it does, read through its tiers to the model, not for one mode. The path of a
request:

1. not enabled for the model, or ``no-cache``/``no-store``: compute (and, for ``no-cache``,
   store), status ``bypass``;
2. local tier hit: ``hit-local`` (a dict lookup, no parsing);
3. otherwise, once per key in this process (single-flight): Redis ``GET`` unless the breaker
   is open; a valid entry is promoted to the local tier, ``hit-redis``; else compute, store in
   the local tier at once and in Redis through the write-behind queue, ``miss``.

For the row cache, ``get_rows_or_compute`` looks up the rows of a batched request (local tier
first, the rest from Redis in one round trip), computes the missing ones in one call and
inserts them the same way.

Keys hold the model version's fingerprint, so a reload or a rollout onto other files moves to
another key space: no flush is needed for correctness, and a flush is a tool. A flush marks the
model at its start and again once Redis is walked; a Redis hit read by a lookup that started
before the last mark is answered but never promoted to the local tier, and the local tier is
emptied at both marks, so no copy read during a flush outlives it.

Nothing here fails a request because of the cache: every tier fault becomes a miss, is counted
in ``cachefleet_cache_errors_total{tier,kind}`` and fed to the breaker. Only compute's own
exceptions propagate, and a failed compute stores nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cachefleet.runtime.cache.admission import AdmissionPolicy, ModelAdmission, Tier
from cachefleet.runtime.cache.api import (
    CacheAnswer,
    CacheDirectives,
    CacheRequest,
    CacheStatus,
    Compute,
    LocalEntryToken,
    RowHit,
    RowsCompute,
)
from cachefleet.runtime.cache.breaker import CircuitBreaker
from cachefleet.runtime.cache.breakers import ShardBreakers
from cachefleet.runtime.cache.completion import passed_on
from cachefleet.runtime.cache.entry import EntryMac, encode_entry, read_entry
from cachefleet.runtime.cache.errors import (
    CacheTierError,
    CorruptEntryError,
    ErrorKind,
    ForgedEntryError,
    is_outage,
)
from cachefleet.runtime.cache.fleet import FleetCoalescing, FleetTurn
from cachefleet.runtime.cache.key import CacheKey, KeySpace, compute_key
from cachefleet.runtime.cache.local import LocalTier, entry_size
from cachefleet.runtime.cache.metrics import CacheMetrics, ModelCacheMetrics
from cachefleet.runtime.cache.singleflight import SingleFlight
from cachefleet.runtime.cache.writebehind import Job as WriteJob
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

if TYPE_CHECKING:  # redis-py is imported only by servers that use Redis (see factory.py)
    from cachefleet.runtime.cache.invalidation import InvalidationListener
    from cachefleet.runtime.cache.redis_tier import RedisTier

logger = logging.getLogger(__name__)
#: A Redis lookup that found nothing (or could not ask): no outputs, nothing refused.
_ABSENT: tuple[None, bool] = (None, False)
_Outcome = tuple[list[Tensor], CacheStatus]


class ReadThroughCache:
    """A :class:`~cachefleet.runtime.cache.api.ResponseCache` over zero to two tiers."""

    def __init__(
        self,
        metrics: RuntimeMetrics,
        *,
        local: LocalTier | None = None,
        redis: RedisTier | None = None,
        breakers: ShardBreakers | None = None,
        insert_queue_size: int = 1024,
        insert_queue_bytes: int = 64 * 2**20,
        listener: InvalidationListener | None = None,
        wall_clock: Callable[[], float] = time.time,
        keys: KeySpace | None = None,
        mac: EntryMac | None = None,
        admission: AdmissionPolicy | None = None,
    ) -> None:
        """``keys``: the fleet's namespace in Redis; ``mac``: seals and checks Redis entries
        (the fleet's secret), None to trust them as they are; ``admission``: which tiers each
        model uses (by default every tier, always)."""
        self.metrics = metrics
        self.keys = keys if keys is not None else KeySpace()
        self._mac = mac
        #: Unix time, for entry expiry (shared by every replica through Redis); injectable, like
        #: the local tier's and the breaker's clocks, so expiry is tested without waiting.
        self._wall_clock = wall_clock
        self.model_metrics = CacheMetrics(metrics)
        self.local = local
        self.redis = redis
        #: One breaker per Redis shard (one in all in standalone and sentinel modes).
        self.breakers = breakers or ShardBreakers(3, 1.0)
        self.writes = WriteBehind(insert_queue_size, insert_queue_bytes)
        self.listener = listener
        #: One computation per fleet for expensive misses (``fleet``); set by the factory.
        self.fleet: FleetCoalescing | None = None
        self.admission = admission or AdmissionPolicy("always", _tiers_of(local, redis))
        self._flight: SingleFlight[_Outcome] = SingleFlight()
        #: model -> monotonic time of its last flush; writes of answers computed before are void.
        self._flushed_at: dict[str, float] = {}
        #: Non-outage fault kinds already logged (an OOM Redis would otherwise log per insert).
        self._reported: set[str] = set()

    async def start(self) -> None:
        if self.redis is not None:
            await self.redis.start()
            try:
                await self.redis.ping()
                logger.info("cache: Redis tier at %s answers", self.redis.where)
            except CacheTierError as error:
                logger.warning("cache: Redis not reachable yet, serving without it: %s", error)
        await self.writes.start()
        if self.listener is not None:
            await self.listener.start()
        if self.fleet is not None:
            await self.fleet.start()

    async def close(self) -> None:
        if self.fleet is not None:
            await self.fleet.close()
        if self.listener is not None:
            await self.listener.close()
        await self.writes.close()
        if self.redis is not None:
            await self.redis.close()

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> CacheAnswer:
        series = self.model_metrics.of(request.model, request.version)
        admission = self.admission.of(request.model, request.version)
        if not request.enabled or not directives.lookup:
            series.bypass.inc()
            started = time.monotonic()
            outputs = await _timed(compute, admission)
            if request.enabled and directives.store:
                self._store(self._key(request), outputs, request.ttl_s, started)
            return CacheAnswer(outputs, CacheStatus.BYPASS)
        if admission.recomputes():  # refreshes what a hit saves (see ``admission.py``)
            series.bypass.inc()
            return CacheAnswer(await _timed(compute, admission), CacheStatus.BYPASS)
        started = time.perf_counter()
        # Admission (``admission.py``): a tier that costs this model more than it saves is
        # skipped, but for a sample that keeps it measured. The key is made only once a tier
        # is used: a model whose every tier is skipped mostly never needs it.
        keyed: list[CacheKey] = []

        def key_of() -> CacheKey:
            if not keyed:
                keyed.append(self._key(request))
            return keyed[0]

        sampled: bool | None = None
        use_local = use_redis = False
        if self.local is not None:
            use_local = admission.local.admitted
            if not use_local:
                sampled = admission.in_sample(request.inputs, key_of)
                use_local = admission.local.wants(sampled)
        if self.redis is not None:
            use_redis = admission.redis.admitted
            if not use_redis:
                if sampled is None:
                    sampled = admission.in_sample(request.inputs, key_of)
                use_redis = admission.redis.wants(sampled)
        if not (use_local or use_redis):
            # Every tier skipped: what ``--cache none`` does, and the compute measured (timed
            # here rather than through ``_timed``: this is most requests of such a model).
            series.bypass.inc()
            began = time.perf_counter()
            outputs = await compute()
            admission.computed(time.perf_counter() - began)
            return CacheAnswer(outputs, CacheStatus.BYPASS)
        key = key_of()
        if use_local and self.local is not None:
            hit = self.local.lookup(key)
            elapsed = time.perf_counter() - started
            self._looked_up_local(key, elapsed, hit=hit is not None)
            admission.local.looked_up(elapsed, hit is not None)
            if hit is not None:
                token = LocalEntryToken(key, hit[1], self._confirm_local)
                return CacheAnswer(hit[0], CacheStatus.HIT_LOCAL, token)
        store = directives.store
        if key in self._flight:
            # Counted apart from hits and misses: those count what the tiers and the model did,
            # once per key, and this request made neither do anything.
            series.coalesced.inc()
        tiers = _Tiers(admission, use_local, use_redis)
        # The fill's last await is ``compute``: if that runs to completion once started (the
        # single-flight then leads it in this task), so does the fill.
        fill = passed_on(compute, lambda: self._fill(key, request, store, compute, started, tiers))
        outputs, status = await self._flight.do(key, fill)
        return CacheAnswer(list(outputs), status)

    async def flush(self, model: str) -> int:
        """Drop ``model`` from this replica's local tier and from Redis, then tell the others.

        Raises :class:`CacheTierError` when Redis cannot be flushed: unlike a lookup, a flush
        that silently did nothing would leave stale answers in place.
        """
        self._flushed_at[model] = time.monotonic()
        removed = self.local.remove_model(model) if self.local is not None else 0
        if self.redis is not None:
            try:
                removed += await self.redis.flush_model(model, self.keys)
            finally:
                # Copies promoted while Redis was walked go too (see the module docstring).
                self.drop_local(model)
            try:
                await self.redis.publish(self.keys.flush_channel, model)
            except CacheTierError as error:
                self._fault("redis", error, self.breakers.of("redis"))
        logger.info("cache: flushed %d entries of model %r", removed, model)
        return removed

    def drop_local(self, model: str) -> None:
        """Another replica flushed ``model`` (or this one's flush walked Redis): forget this
        replica's copies, and keep none read before now."""
        self._flushed_at[model] = time.monotonic()
        if self.local is not None:
            self.local.remove_model(model)

    def _looked_up_local(self, key: CacheKey, elapsed_s: float, *, hit: bool) -> None:
        """Count a local lookup and, when it found the entry, the hit: the one place local
        hits are counted (a lookup's, and a liveness token's)."""
        series = self.model_metrics.of(key.model, key.version)
        series.lookup_local.observe(elapsed_s)
        if hit:
            series.hits_local.inc()
            self.metrics.triton.record(key.model, key.version, hit=True, duration_s=elapsed_s)

    def _confirm_local(self, key: CacheKey, identity: object, started_ns: int) -> int | None:
        """A :class:`LocalEntryToken`'s check: the entry still lives, and counts a hit."""
        if self.local is None or self.local.entry(key) is not identity:
            return None
        now_ns = time.perf_counter_ns()
        self._looked_up_local(key, (now_ns - started_ns) / 1e9, hit=True)
        return now_ns

    @staticmethod
    def _key(request: CacheRequest) -> CacheKey:
        return compute_key(
            request.model, request.version, request.fingerprint, request.inputs, request.parameters
        )

    async def _fill(
        self,
        key: CacheKey,
        request: CacheRequest,
        store: bool,
        compute: Compute,
        started: float,
        tiers: _Tiers,
    ) -> _Outcome:
        labels = (request.model, request.version)
        series = self.model_metrics.of(*labels)
        found, refused = await self._redis_lookup(key, request, tiers) if tiers.redis else _ABSENT
        if found is not None:
            self.metrics.triton.record(*labels, hit=True, duration_s=time.perf_counter() - started)
            return found, CacheStatus.HIT_REDIS
        lookup_s = time.perf_counter() - started
        # An entry just refused (corrupt or forged) is being replaced by this computation: no
        # lease, whose script would read the same bad entry again before its delete lands.
        turn = FleetTurn(key) if refused else await self._fleet_turn(key, request, tiers)
        if turn.filled is not None:  # another replica computed it meanwhile
            series.hits_redis.inc()
            self.metrics.triton.record(*labels, hit=True, duration_s=time.perf_counter() - started)
            return turn.filled, CacheStatus.HIT_REDIS
        series.misses.inc()
        computed_at = time.monotonic()
        try:
            outputs = await _timed(compute, tiers.admission)
            insert_started = time.perf_counter()
            if store:
                self._store(key, outputs, request.ttl_s, computed_at, tiers, turn)
        finally:
            turn.finish()
        insert_s = time.perf_counter() - insert_started
        self.metrics.triton.record(*labels, hit=False, duration_s=lookup_s + insert_s)
        return outputs, CacheStatus.MISS

    async def _fleet_turn(self, key: CacheKey, request: CacheRequest, tiers: _Tiers) -> FleetTurn:
        """Where this process's one computation of ``key`` is about to start: the fleet may
        answer it, or let this replica compute (``fleet``)."""
        if self.fleet is None or self.redis is None or not tiers.redis:
            return FleetTurn(key)
        since = time.monotonic()
        return await self.fleet.turn(
            key, lambda blob: self._accept(key, blob, request.ttl_s, since, tiers.local)
        )

    async def _redis_lookup(
        self, key: CacheKey, request: CacheRequest, tiers: _Tiers
    ) -> tuple[list[Tensor] | None, bool]:
        """The outputs of ``key``'s Redis entry, or None; and whether an entry was there but
        refused (corrupt or forged)."""
        if self.redis is None:
            return _ABSENT
        breaker = self._breaker(key)
        if not breaker.allow():
            return _ABSENT
        series = self.model_metrics.of(request.model, request.version)
        since = time.monotonic()
        started = time.perf_counter()
        try:
            blob = await self.redis.get(self.keys.redis_key(key))
        except CacheTierError as error:
            self._fault("redis", error, breaker)
            return _ABSENT
        finally:
            elapsed = time.perf_counter() - started
            series.lookup_redis.observe(elapsed)
        breaker.record_success()
        outputs = (
            None if blob is None else self._accept(key, blob, request.ttl_s, since, tiers.local)
        )
        tiers.admission.redis.looked_up(elapsed, outputs is not None)
        if outputs is not None:
            series.hits_redis.inc()
        return outputs, blob is not None and outputs is None

    async def get_rows_or_compute(
        self, rows: Sequence[CacheRequest], compute: RowsCompute
    ) -> list[RowHit]:
        """Each row from the local tier, else the rest from Redis in one round trip, else
        computed (all missing rows in one call) and inserted like any answer."""
        if not rows:
            return []
        series = self.model_metrics.of(rows[0].model, rows[0].version)
        keys = [self._key(row) for row in rows]
        found: list[RowHit | None] = [None] * len(rows)
        if self.local is not None:
            for index, key in enumerate(keys):
                hit = self.local.get(key)
                if hit is not None:
                    found[index] = (hit, CacheStatus.HIT_LOCAL)
        series.row_hits_local.inc(sum(1 for each in found if each is not None))
        remaining = [index for index, each in enumerate(found) if each is None]
        since = time.monotonic()
        blobs = await self._redis_get_many([keys[index] for index in remaining], series)
        for index, blob in zip(remaining, blobs, strict=True):
            if blob is None:
                continue
            outputs = self._accept(keys[index], blob, rows[index].ttl_s, since)
            if outputs is not None:
                found[index] = (outputs, CacheStatus.HIT_REDIS)
                series.row_hits_redis.inc()
        missing = [index for index, each in enumerate(found) if each is None]
        if missing:
            series.row_misses.inc(len(missing))
            since = time.monotonic()
            computed = await compute(missing)
            for index, row_outputs in zip(missing, computed, strict=True):
                self._store(keys[index], row_outputs, rows[index].ttl_s, since)
                found[index] = (list(row_outputs), CacheStatus.MISS)
        return [each for each in found if each is not None]

    async def _redis_get_many(
        self, keys: Sequence[CacheKey], series: ModelCacheMetrics
    ) -> list[bytes | None]:
        """The keys' entries in one round trip per shard, the shards asked concurrently (one
        in standalone and sentinel modes). A shard whose breaker is open is not asked, and a
        shard that fails costs only its own keys: they are misses, the others still hit."""
        blobs: list[bytes | None] = [None] * len(keys)
        if not keys or self.redis is None:
            return blobs
        shards: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            shards.setdefault(self.redis.shard_of(self.keys.redis_key(key)), []).append(index)
        asked = {
            shard: indices
            for shard, indices in shards.items()
            if self.breakers.of(shard).allow()  # one probe per shard
        }
        if not asked:
            return blobs
        started = time.perf_counter()
        found = await asyncio.gather(
            *(self._shard_get_many(shard, [keys[i] for i in idx]) for shard, idx in asked.items())
        )
        series.lookup_redis.observe(time.perf_counter() - started)
        for indices, values in zip(asked.values(), found, strict=True):
            for index, blob in zip(indices, values, strict=True):
                blobs[index] = blob
        return blobs

    async def _shard_get_many(self, shard: str, keys: Sequence[CacheKey]) -> list[bytes | None]:
        assert self.redis is not None
        breaker = self.breakers.of(shard)
        try:
            values = await self.redis.get_many([self.keys.redis_key(key) for key in keys])
        except CacheTierError as error:
            self._fault("redis", error, breaker)
            return [None] * len(keys)
        breaker.record_success()
        return values

    def _accept(
        self, key: CacheKey, blob: bytes, ttl_s: float, since: float, promote: bool = True
    ) -> list[Tensor] | None:
        """The outputs of a Redis entry read by a lookup that started at ``since`` (monotonic),
        promoted to the local tier unless a flush of the model began since; None (and the
        entry deleted) if it is corrupt or forged."""
        try:
            entry = read_entry(blob, key.digest, self._mac)
        except CorruptEntryError as error:
            kind: ErrorKind = "forged" if isinstance(error, ForgedEntryError) else "corrupt"
            logger.warning("cache: dropping %s entry %s: %s", kind, self.keys.redis_key(key), error)
            self.metrics.cache_errors.labels("redis", kind).inc()
            self._submit(key, self._delete_job(key))
            return None
        if self._flushed_at.get(key.model, -1.0) >= since:
            return entry.outputs  # read before a flush ended: answered, never kept
        # A promoted copy lives no longer than the Redis entry it came from (ttl 0: forever).
        if entry.expires_at is not None:
            ttl_s = entry.expires_at - self._wall_clock()
        fresh = entry.expires_at is None or ttl_s > 0
        if (
            promote
            and self.local is not None
            and fresh
            and self.local.put(key, entry.outputs, ttl_s)
        ):
            self.model_metrics.of(key.model, key.version).inserts_local.inc()
        return entry.outputs

    def _store(
        self,
        key: CacheKey,
        outputs: Sequence[Tensor],
        ttl_s: float,
        since: float,
        tiers: _Tiers | None = None,
        turn: FleetTurn | None = None,
    ) -> None:
        """Insert a fresh answer: local at once (cheap), Redis behind the response (or, for
        a fleet lease's holder, at once and then announced: ``turn``); only into the tiers
        admission lets this request use (``tiers``; every tier when None)."""
        if self._flushed_at.get(key.model, -1.0) >= since:
            return  # computed before a flush of its model: it may be stale
        if self.local is not None and (tiers is None or tiers.local):
            started = time.perf_counter()
            kept = self.local.put(key, outputs, ttl_s)
            if tiers is not None:
                tiers.admission.local.inserted(time.perf_counter() - started)
            if kept:
                self.model_metrics.of(key.model, key.version).inserts_local.inc()
        if self.redis is not None and (tiers is None or tiers.redis):
            job = self._insert_job(key, tuple(outputs), ttl_s, since)
            if turn is None or not turn.hand_over(job):
                self._submit(key, job, entry_size(outputs))

    def _submit(self, key: CacheKey, job: WriteJob, size_bytes: int = 0) -> None:
        if not self.writes.submit(job, size_bytes):
            self.model_metrics.of(key.model, key.version).insert_dropped.inc()

    def _insert_job(
        self, key: CacheKey, outputs: tuple[Tensor, ...], ttl_s: float, since: float
    ) -> WriteJob:
        """The insert of one answer: it queues its SET and returns the future of its outcome, so
        that a drain of inserts needs neither a coroutine nor a task per insert."""

        def insert() -> asyncio.Future[None]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self.redis is None or self._flushed_at.get(key.model, -1.0) >= since:
                done.set_result(None)
                return done
            breaker = self._breaker(key)
            if not breaker.allow():
                done.set_result(None)
                return done
            started = time.perf_counter()
            expires_at = self._wall_clock() + ttl_s if ttl_s > 0 else None
            blob = encode_entry(key.digest, outputs, expires_at, self._mac)
            sent = self.redis.set_soon(self.keys.redis_key(key), blob, ttl_s)
            admission = self.admission.of(key.model, key.version)
            admission.redis.inserted(time.perf_counter() - started)
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
            self.model_metrics.of(key.model, key.version).inserts_redis.inc()

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
            self._fault("redis", error, breaker)
        else:
            breaker.record_success()
        done.set_result(None)
        return error is None

    def _delete_job(self, key: CacheKey) -> WriteJob:
        """The removal of a corrupt entry. Like an insert, it queues its UNLINK when the drain
        takes it, so it stays ahead of the insert of the right answer, queued after it."""

        def delete() -> asyncio.Future[None]:
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if self.redis is None or not (breaker := self._breaker(key)).allow():
                done.set_result(None)
                return done
            sent = self.redis.delete_soon(self.keys.redis_key(key))
            sent.add_done_callback(functools.partial(self._written, breaker, done))
            return done

        return delete

    def redis_breaker(self, key: CacheKey) -> CircuitBreaker:
        """The breaker of ``key``'s Redis shard, for the fleet's commands on that key."""
        return self._breaker(key)

    def redis_fault(self, error: CacheTierError, breaker: CircuitBreaker) -> None:
        """Count a Redis fault of the fleet's commands and tell ``breaker``, as for a lookup."""
        self._fault("redis", error, breaker)

    def _breaker(self, key: CacheKey) -> CircuitBreaker:
        """The breaker of the shard that serves ``key`` (the only one outside cluster mode)."""
        assert self.redis is not None
        return self.breakers.of(self.redis.shard_of(self.keys.redis_key(key)))

    def _fault(self, tier: str, error: CacheTierError, *breakers: CircuitBreaker) -> None:
        """Count a fault once, and tell the breakers of every shard the call went to."""
        kind: ErrorKind = error.kind
        self.metrics.cache_errors.labels(tier, kind).inc()
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


@dataclass(frozen=True, slots=True)
class _Tiers:
    """The tiers one request uses, as admission decided when it was looked up."""

    admission: ModelAdmission
    local: bool
    redis: bool


def _tiers_of(local: LocalTier | None, redis: RedisTier | None) -> tuple[Tier, ...]:
    """The tiers a cache has, as admission reports them."""
    return (*(("local",) if local is not None else ()), *(("redis",) if redis is not None else ()))


async def _timed(compute: Compute, admission: ModelAdmission) -> list[Tensor]:
    """Compute, and tell admission how long it took (what a hit would save)."""
    started = time.perf_counter()
    outputs = await compute()
    admission.computed(time.perf_counter() - started)
    return outputs
