"""The read-through response cache: its tiers in order, then the model; writes behind.

One class serves ``local``, ``redis`` and ``tiered``: it holds the in-process tiers (the local
tier) and at most one shared tier (Redis), each a :class:`~cachefleet.runtime.cache.tier.Tier`,
and never names one. A request:

1. decides once which tiers it uses (``admission``; a model whose tiers all cost more than they
   save skips them), and whether it bypasses the cache (not enabled for the model,
   ``no-cache``/``no-store``, or admission re-measuring the model): a bypass computes, timed
   and counted like any compute, status ``bypass``;
2. looks its in-process tiers up in turn (:meth:`ReadThroughCache._first_hit`, the one loop
   over tiers: each lookup timed, counted and told to admission the same way); a hit is
   ``hit-<tier>``;
3. otherwise, once per key in this process (single-flight), looks up the shared tier with the
   same loop, then asks the fleet (``fleet``: one computation per key in the fleet), then
   computes, ``miss``. A hit in a later tier is promoted to the earlier ones; a computed answer
   is inserted into every tier the request uses (the shared tier's insert goes behind the
   response, or, for a fleet lease's holder, at once).

The row cache (:meth:`ReadThroughCache.get_rows_or_compute`) takes the same steps with many
keys at once: the same admission, the same loop over tiers (one batched lookup per tier), the
same single-flight per row key (the rows nobody here is computing are led by the batch: the
shared tier, then one compute for all of them; the others are waited for, counted as
coalesced), the same counters (its own row counters, and Triton's), the same inserts. A batch
leads before it waits, so batches never wait in a ring; a failed or cancelled leading batch
sends its followers off to compute those rows themselves (its error may be another row's).
With a Redis tier, each led row takes its turn in the fleet as a whole request does (all
asked at once; the rows this replica is to compute run as their turns come, never held back by
a row it waits for).

Requests share a computation (single-flight, of a request or a row; the fleet's lease) only
with requests on the same scheduling terms (``terms``: the priority level and queue timeout the
compute carries), so that no request is queued, delayed or refused as another's parameters
would have it; only requests on the neutral terms take part in the fleet's coalescing, so a
lease holder elsewhere always runs on the terms of those waiting for it.

Keys hold the model version's fingerprint, so a reload or a rollout onto other files moves to
another key space: no flush is needed for correctness, and a flush is a tool. A flush marks the
model (``flush_marks``) at its start and again once every tier is walked; an answer read or
computed by work that started before the last mark is answered but never kept.

Nothing here fails a request because of the cache: every tier fault is the tier's to count and
makes a miss. Only compute's own exceptions propagate, and a failed compute stores nothing.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import Counter

from cachefleet.runtime.cache.admission import AdmissionPolicy, ModelAdmission
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
from cachefleet.runtime.cache.completion import passed_on
from cachefleet.runtime.cache.fleet import FleetCoalescing, FleetTurn
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import CacheKey, compute_key
from cachefleet.runtime.cache.metrics import CacheMetrics, ModelCacheMetrics
from cachefleet.runtime.cache.singleflight import SingleFlight
from cachefleet.runtime.cache.terms import FlightKey, flight_key, terms_of
from cachefleet.runtime.cache.tier import Found, Tier, flushed
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.metrics import PlainCounter, RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

if TYPE_CHECKING:  # redis-py is imported only by servers that use Redis (see factory.py)
    from cachefleet.runtime.cache.invalidation import InvalidationListener

logger = logging.getLogger(__name__)
_Outcome = tuple[list[Tensor], CacheStatus]


class TensorTier(Tier[CacheKey, Found, Sequence[Tensor]], Protocol):
    """A tier of output tensors by request key (local, Redis), which the loop looks up."""

    def asks(self, key: CacheKey) -> bool:
        """Whether a lookup of ``key`` would reach the tier now: an in-process tier always
        does; the shared tier not while the breaker of ``key``'s shard is open (a True may be
        that breaker's one probe, so a lookup follows it). A tier not asked is no lookup:
        neither timed nor counted."""
        ...

    def lookup_many(
        self, keys: Sequence[CacheKey]
    ) -> list[Found | None] | Awaitable[list[Found | None]]:
        """``lookup`` of several keys (a batched request's rows) at once: one round trip per
        shard for the shared tier, which asks its breakers itself."""
        ...


class InProcessTier(TensorTier, Protocol):
    """A tier in this process: it answers at once, and its entries have identities a
    liveness token can name."""

    def lookup(self, key: CacheKey) -> Found | None: ...

    def flush(self, model: str) -> int: ...

    def entry(self, key: CacheKey) -> object | None: ...


class SharedTierLike(TensorTier, Protocol):
    """The shared tier, as fleet coalescing and the write-behind need it."""

    writes: WriteBehind

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    def accept(self, key: CacheKey, blob: bytes | None) -> Found | None: ...

    def insert_job(
        self, key: CacheKey, outputs: tuple[Tensor, ...], ttl_s: float
    ) -> Callable[[], Awaitable[None]]: ...

    def refused(self, key: CacheKey) -> bool: ...


#: Makes the flush listener, given what to call for each flush another replica announces.
Listen = Callable[[Callable[[str], None]], "InvalidationListener"]


class ReadThroughCache:
    """A :class:`~cachefleet.runtime.cache.api.ResponseCache` over its tiers."""

    def __init__(
        self,
        metrics: RuntimeMetrics,
        near: Sequence[InProcessTier],
        shared: SharedTierLike | None = None,
        *,
        cache_metrics: CacheMetrics | None = None,
        marks: FlushMarks | None = None,
        admission: AdmissionPolicy | None = None,
        fleet: FleetCoalescing | None = None,
        listen: Listen | None = None,
        front: Sequence[Tier[Any, Any, Any]] = (),
    ) -> None:
        """``near``: the in-process tiers, looked up first, in order; ``shared``: the tier all
        replicas share, looked up last, once per key (single-flight) and fleet (``fleet``);
        ``front``: the tiers in front of this cache, of rendered answers (the memo), which the
        transports consult and this cache flushes with the others;
        ``listen``: makes the listener that drops this replica's copies when another replica
        flushes a model; ``admission``: which tiers each model uses (by default every tier,
        always)."""
        self.metrics = metrics
        self.model_metrics = cache_metrics or CacheMetrics(metrics)
        self.front = tuple(front)
        self.near = tuple(near)
        self.shared = shared
        self.tiers: tuple[TensorTier, ...] = (*near, *((shared,) if shared else ()))
        self.marks = marks or FlushMarks()
        names = tuple(tier.name for tier in self.tiers)
        self.admission = admission or AdmissionPolicy("always", names)  # type: ignore[arg-type]
        self.fleet = fleet
        self.listener = listen(self.drop_near) if listen is not None else None
        #: The shared tier's write-behind queue (what tests and profiles wait on to drain);
        #: without a shared tier, one that nothing is ever written to.
        self.writes = shared.writes if shared is not None else WriteBehind(1)
        #: By key and terms: requests share a computation only on the same terms (``terms``).
        self._flight: SingleFlight[_Outcome] = SingleFlight()
        #: The ``X-Cache`` value of a hit in each tier (``hit-<name>``).
        self._hits = {id(tier): CacheStatus(f"hit-{tier.name}") for tier in self.tiers}
        #: Each in-process tier's check of its liveness tokens, bound once.
        self._confirms = {id(tier): functools.partial(self._confirm, tier) for tier in near}

    async def start(self) -> None:
        if self.shared is not None:
            await self.shared.start()
            await self.shared.writes.start()
        if self.listener is not None:
            await self.listener.start()
        if self.fleet is not None:
            await self.fleet.start()

    async def close(self) -> None:
        if self.fleet is not None:
            await self.fleet.close()
        if self.listener is not None:
            await self.listener.close()
        if self.shared is not None:
            await self.shared.writes.close()
            await self.shared.close()

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> CacheAnswer:
        started = time.perf_counter()
        plan = self._plan(request, directives)
        if plan.bypass:
            since = self.marks.now()
            outputs = await self._computed(compute, plan)
            if plan.store:
                self._store(plan.key(), outputs, request.ttl_s, since, self.tiers)
            return CacheAnswer(outputs, CacheStatus.BYPASS)
        hit = await self._first_hit(plan, plan.near, started, first_from=started)
        if hit is not None:
            tier, found = hit
            token = None
            if found.identity is not None:
                token = LocalEntryToken(plan.key(), found.identity, self._confirms[id(tier)])
            return CacheAnswer(found.outputs, self._hits[id(tier)], token)
        plan.terms = terms_of(compute)  # only a miss is shared: a hit never reads them
        key = plan.flight_key(plan.key())
        if key in self._flight:
            # Counted apart from hits and misses: those count what the tiers and the model did,
            # once per key, and this request made neither do anything.
            plan.series.coalesced.inc()
        # The fill's last await is ``compute``: if that runs to completion once started (the
        # single-flight then leads it in this task), so does the fill.
        fill = passed_on(compute, lambda: self._fill(plan, directives.store, compute, started))
        outputs, status = await self._flight.do(key, fill)
        return CacheAnswer(list(outputs), status)

    def _plan(self, request: CacheRequest, directives: CacheDirectives) -> _Plan:
        """Which tiers ``request`` uses, decided once: admission's per-tier verdicts (a tier
        that costs this model more than it saves is skipped, but for a sample that keeps it
        measured), or a bypass. The key is made only once a tier needs it: a model whose every
        tier is skipped mostly never does."""
        series = self.model_metrics.of(request.model, request.version)
        admission = self.admission.of(request.model, request.version)
        plan = _Plan(request, series, admission, self._key)
        if not request.enabled or not directives.lookup:
            plan.store = request.enabled and directives.store
            return plan
        if admission.recomputes():  # refreshes what a hit saves (see ``admission.py``)
            return plan
        sampled: bool | None = None
        for tier in self.tiers:
            judge = admission.tier(tier.name)
            if not judge.admitted and sampled is None:
                sampled = admission.in_sample(request.inputs, plan.key)
            if judge.admitted or judge.wants(bool(sampled)):
                plan.tiers.append(tier)
                if tier is not self.shared:
                    plan.near.append(tier)
        plan.bypass = not plan.tiers  # every tier skipped: what ``--cache none`` does
        return plan

    async def _first_hit(
        self,
        plan: _Plan,
        tiers: Sequence[TensorTier],
        started: float,
        first_from: float | None = None,
    ) -> tuple[TensorTier, Found] | None:
        """The one loop over tiers: look each up in turn (a tier that cannot be asked now is
        passed over, uncounted); the first hit is promoted to the earlier tiers of the plan.
        Each lookup is timed (the request's first from its start, ``first_from``, so that it
        includes the key), counted and told to admission; a hit's time for Triton's counters
        is from the request's start (``started``)."""
        key = plan.key()
        for tier in tiers:
            if not tier.asks(key):
                continue
            # When it was read, for a promotion (none from the first tier: nothing before it).
            since = self.marks.now() if tier is not plan.tiers[0] else 0.0
            began = time.perf_counter() if first_from is None else first_from
            first_from = None
            found = tier.lookup(key)
            if found is not None and not isinstance(found, Found):
                found = await found  # a tier that waits (see ``tier``)
            now = time.perf_counter()
            self._looked_up(plan, tier, now - began, found is not None)
            if found is not None:
                self.metrics.triton.record(
                    plan.request.model, plan.request.version, hit=True, duration_s=now - started
                )
                if since:
                    self._promote(key, found, plan.tiers[: plan.tiers.index(tier)], plan, since)
                return tier, found
        return None

    @staticmethod
    def _key(request: CacheRequest) -> CacheKey:
        """The request's cache key (``key``); an attribute, so a profile can wrap it."""
        return compute_key(
            request.model, request.version, request.fingerprint, request.inputs, request.parameters
        )

    def _looked_up(self, plan: _Plan, tier: TensorTier, elapsed_s: float, hit: bool) -> None:
        """Count one lookup of ``tier``: the one place lookups are timed and hits counted."""
        plan.series.lookup[tier.name].observe(elapsed_s)
        plan.admission.tier(tier.name).looked_up(elapsed_s, hit)
        if hit:
            plan.series.hits[tier.name].inc()

    def _confirm(
        self, tier: InProcessTier, key: CacheKey, identity: object, started_ns: int
    ) -> int | None:
        """A :class:`LocalEntryToken`'s check: the entry still lives, and counts a hit as a
        lookup of its tier does."""
        if tier.entry(key) is not identity:
            return None
        now_ns = time.perf_counter_ns()
        elapsed = (now_ns - started_ns) / 1e9
        series = self.model_metrics.of(key.model, key.version)
        series.lookup[tier.name].observe(elapsed)
        series.hits[tier.name].inc()
        self.metrics.triton.record(key.model, key.version, hit=True, duration_s=elapsed)
        return now_ns

    async def _fill(self, plan: _Plan, store: bool, compute: Compute, started: float) -> _Outcome:
        """A miss of every in-process tier, once per key here: the shared tier, the fleet,
        then the model."""
        request, key = plan.request, plan.key()
        shared = [tier for tier in plan.tiers if tier is self.shared]
        hit = await self._first_hit(plan, shared, started) if shared else None
        if hit is not None:
            return hit[1].outputs, self._hits[id(hit[0])]
        lookup_s = time.perf_counter() - started
        since = self.marks.now()
        turn = await self._fleet_turn(key, plan)
        if turn.filled is not None:  # another replica computed it
            return self._fleet_filled(plan, key, turn.filled, since, started, plan.series.hits)
        plan.series.misses.inc()
        since = self.marks.now()
        try:
            outputs = await self._computed(compute, plan)
            insert_started = time.perf_counter()
            if store:
                self._store(key, outputs, request.ttl_s, since, plan.tiers, plan, turn)
        finally:
            turn.finish()
        insert_s = time.perf_counter() - insert_started
        self.metrics.triton.record(
            request.model, request.version, hit=False, duration_s=lookup_s + insert_s
        )
        return outputs, CacheStatus.MISS

    async def _fleet_turn(self, key: CacheKey, plan: _Plan) -> FleetTurn:
        """Where this process's one computation of ``key`` is about to start: the fleet may
        answer it, or let this replica compute (``fleet``). An entry the lookup just refused
        (corrupt or forged) is being replaced by this computation: no lease, whose script would
        read the same bad entry again before its delete lands."""
        shared = self.shared
        if self.fleet is None or shared is None or shared not in plan.tiers:
            return FleetTurn(key)
        if not plan.neutral:
            return FleetTurn(key)  # a lease holder's computation runs on the neutral terms
        if shared.refused(key):
            return FleetTurn(key)
        return await self.fleet.turn(key, functools.partial(shared.accept, key))

    def _fleet_filled(
        self,
        plan: _Plan,
        key: CacheKey,
        found: Found,
        since: float,
        started: float,
        hits: dict[str, Counter] | dict[str, PlainCounter],
    ) -> _Outcome:
        """An answer another replica computed while this one waited for its turn: a hit of
        the shared tier (``hits``: the request's counters or the row counters), promoted."""
        assert self.shared is not None  # only the shared tier's fleet fills
        request = plan.request
        hits[self.shared.name].inc()
        self.metrics.triton.record(
            request.model, request.version, hit=True, duration_s=time.perf_counter() - started
        )
        self._promote(key, found, plan.tiers[:-1], plan, since)
        return found.outputs, self._hits[id(self.shared)]

    async def _computed(self, compute: Compute, plan: _Plan) -> list[Tensor]:
        """Compute, and tell admission how long it took (what a hit would save): every compute
        of a cached model, bypass or miss, is timed here."""
        if plan.bypass:
            plan.series.bypass.inc()
        began = time.perf_counter()
        outputs = await compute()
        plan.admission.computed(time.perf_counter() - began)
        return outputs

    def _promote(
        self, key: CacheKey, found: Found, tiers: Sequence[TensorTier], plan: _Plan, since: float
    ) -> None:
        """Keep a later tier's answer in the earlier ``tiers`` too, unless a flush of the model
        began since it was read, for no longer than the entry it copies has left."""
        if not tiers or self.marks.stale(key.model, since):
            return
        ttl_s = plan.request.ttl_s if found.ttl_s is None else found.ttl_s
        if found.ttl_s is None or ttl_s > 0:
            self._insert_into(tiers, key, found.outputs, ttl_s, plan.series)

    def _store(
        self,
        key: CacheKey,
        outputs: Sequence[Tensor],
        ttl_s: float,
        since: float,
        tiers: Sequence[TensorTier],
        plan: _Plan | None = None,
        turn: FleetTurn | None = None,
    ) -> None:
        """Insert a fresh answer computed since ``since`` into ``tiers``: in-process ones at
        once, the shared one behind the response (or, for a fleet lease's holder, at once and
        then announced: ``turn``)."""
        if self.marks.stale(key.model, since):
            return  # computed before a flush of its model: it may be stale
        shared = self.shared
        if (
            shared is not None
            and turn is not None
            and shared in tiers
            and turn.hand_over(shared.insert_job(key, tuple(outputs), ttl_s))
        ):
            tiers = [tier for tier in tiers if tier is not shared]
        series = plan.series if plan else self.model_metrics.of(key.model, key.version)
        self._insert_into(tiers, key, outputs, ttl_s, series)

    def _insert_into(
        self,
        tiers: Sequence[TensorTier],
        key: CacheKey,
        outputs: Sequence[Tensor],
        ttl_s: float,
        series: ModelCacheMetrics,
    ) -> None:
        """The one place answers go into tiers: each in-process insert timed for admission
        and counted (the shared tier counts its own once Redis has it)."""
        admission = self.admission.of(key.model, key.version)
        for tier in tiers:
            began = time.perf_counter()
            kept = tier.insert(key, outputs, ttl_s)
            if tier is not self.shared:
                admission.tier(tier.name).inserted(time.perf_counter() - began)
                if kept:
                    series.inserts[tier.name].inc()

    async def flush(self, model: str) -> int:
        """Drop ``model`` from every tier (and tell the other replicas, through the shared
        tier). Raises :class:`CacheTierError` when a tier cannot be flushed: unlike a lookup,
        a flush that silently did nothing would leave stale answers in place."""
        self.marks.mark(model)
        removed = 0
        try:
            for tier in (*self.front, *self.tiers):
                removed += await flushed(tier, model)
        finally:
            # Copies promoted while the shared tier was walked go too (see the docstring).
            if self.shared is not None:
                self.drop_near(model)
        logger.info("cache: flushed %d entries of model %r", removed, model)
        return removed

    def drop_near(self, model: str) -> None:
        """Another replica flushed ``model`` (or this one's flush walked the shared tier):
        forget this replica's copies, and keep none read before now."""
        self.marks.mark(model)
        for tier in self.near:
            tier.flush(model)

    async def get_rows_or_compute(
        self, rows: Sequence[CacheRequest], compute: RowsCompute
    ) -> list[RowHit]:
        """Each row from the first in-process tier that holds it; else, once per key in this
        process (single-flight, per row), from the shared tier, else computed (all the rows
        this batch leads in one call) and inserted like any answer. A row another request is
        computing waits for it, and is counted as coalesced, as a whole request is."""
        if not rows:
            return []
        started = time.perf_counter()
        plan = self._plan(rows[0], CacheDirectives())
        plan.terms = terms_of(compute)
        keys = [self._key(row) for row in rows]
        found: list[RowHit | None] = [None] * len(rows)
        missing = await self._rows_first_hit(plan, plan.near, rows, keys, found, range(len(rows)))
        while missing:  # rows whose leader gave up go round again
            missing = await self._rows_fill(plan, rows, keys, found, missing, compute, started)
        return [each for each in found if each is not None]

    async def _rows_first_hit(
        self,
        plan: _Plan,
        tiers: Sequence[TensorTier],
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        found: list[RowHit | None],
        remaining: Sequence[int],
    ) -> list[int]:
        """The loop over tiers for many rows (one batched lookup per tier), counted as
        :meth:`_first_hit` counts; returns the rows none held."""
        remaining = list(remaining)
        for tier in tiers:
            if not remaining:
                break
            since = self.marks.now()
            began = time.perf_counter()
            answers = tier.lookup_many([keys[i] for i in remaining])
            if not isinstance(answers, list):
                answers = await answers
            elapsed = time.perf_counter() - began
            plan.series.lookup[tier.name].observe(elapsed)
            judge = plan.admission.tier(tier.name)
            earlier = plan.tiers[: plan.tiers.index(tier)]
            held = 0
            for row, answer in zip(remaining, answers, strict=True):
                judge.looked_up(elapsed / len(remaining), answer is not None)
                if answer is None:
                    continue
                held += 1
                found[row] = (answer.outputs, self._hits[id(tier)])
                self.metrics.triton.record(
                    rows[row].model, rows[row].version, hit=True, duration_s=elapsed
                )
                self._promote(keys[row], answer, earlier, plan.of_row(rows[row]), since)
            plan.series.row_hits[tier.name].inc(held)
            remaining = [row for row in remaining if found[row] is None]
        return remaining

    async def _rows_fill(
        self,
        plan: _Plan,
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        found: list[RowHit | None],
        missing: Sequence[int],
        compute: RowsCompute,
        started: float,
    ) -> list[int]:
        """One round for the rows no in-process tier held: lead the keys nobody here is
        computing, then wait for the others'. Returns the rows whose leader gave up."""
        by_key: dict[CacheKey, list[int]] = {}
        for row in missing:
            by_key.setdefault(keys[row], []).append(row)
        led: dict[CacheKey, tuple[list[int], asyncio.Future[_Outcome]]] = {}
        followed: list[tuple[list[int], asyncio.Future[_Outcome]]] = []
        for key, group in by_key.items():
            flight = self._flight.current(plan.flight_key(key))
            if flight is None:
                led[key] = (group, self._flight.claim(plan.flight_key(key)))
            else:
                followed.append((group, flight))
        if led:  # first, so that no leader waits on a follower: batches never wait in a ring
            await self._rows_lead(plan, rows, keys, found, led, compute, started)
        gave_up: list[int] = []
        for group, flight in followed:
            outcome = await self._flight.follow(flight)
            if outcome is None:
                gave_up.extend(group)
                continue
            plan.series.row_coalesced.inc(len(group))
            for row in group:
                found[row] = (list(outcome[0]), outcome[1])
        return gave_up

    async def _rows_lead(
        self,
        plan: _Plan,
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        found: list[RowHit | None],
        led: dict[CacheKey, tuple[list[int], asyncio.Future[_Outcome]]],
        compute: RowsCompute,
        started: float,
    ) -> None:
        """The rows this batch leads, one per key: the shared tier, then one compute of the
        rest. Each key's followers get its answer; if the compute fails or is cancelled they
        start over on their own, since the failure may be another row's of this batch."""
        try:
            heads = [group[0] for group, _ in led.values()]
            shared = [tier for tier in plan.tiers if tier is self.shared]
            remaining = await self._rows_first_hit(plan, shared, rows, keys, found, heads)
            if remaining and self.fleet is not None and self.shared in shared and plan.neutral:
                await self._rows_fleet(plan, rows, keys, found, remaining, compute, started)
            elif remaining:
                await self._rows_computed(plan, rows, keys, found, remaining, compute, started)
        except BaseException:
            for key, (_, flight) in led.items():
                self._flight.abandon(plan.flight_key(key), flight)
            raise
        for key, (group, flight) in led.items():
            outcome = found[group[0]]
            assert outcome is not None  # every head was looked up or computed
            if len(group) > 1:  # the same row twice in one batch: computed once
                plan.series.row_coalesced.inc(len(group) - 1)
                for row in group[1:]:
                    found[row] = (list(outcome[0]), outcome[1])
            self._flight.settle(plan.flight_key(key), flight, outcome)

    async def _rows_fleet(
        self,
        plan: _Plan,
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        found: list[RowHit | None],
        remaining: Sequence[int],
        compute: RowsCompute,
        started: float,
    ) -> None:
        """The fleet's turn of each row (``_fleet_turn``, all asked at once): a row another
        replica computed is a shared-tier hit; the rows this replica is to compute are
        computed as their turns come (those that come together in one call), never held back
        by a row it waits for: replicas never wait for each other in a ring."""
        since = self.marks.now()
        asked: dict[asyncio.Future[FleetTurn], int] = {
            asyncio.ensure_future(self._fleet_turn(keys[row], plan)): row for row in remaining
        }
        pending: set[asyncio.Future[FleetTurn]] = set(asked)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                turns = {asked[each]: each.result() for each in done}
                ours = {row: turn for row, turn in turns.items() if turn.filled is None}
                for row, turn in turns.items():
                    if turn.filled is not None:
                        found[row] = self._fleet_filled(
                            plan.of_row(rows[row]),
                            keys[row],
                            turn.filled,
                            since,
                            started,
                            plan.series.row_hits,
                        )
                try:
                    if ours:
                        await self._rows_computed(
                            plan, rows, keys, found, list(ours), compute, started, ours
                        )
                finally:
                    for turn in ours.values():
                        turn.finish()
        finally:
            for each in pending:  # this batch failed or went away: the fleet goes on without it
                each.cancel()
                each.add_done_callback(_finish_turn)

    async def _rows_computed(
        self,
        plan: _Plan,
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        found: list[RowHit | None],
        remaining: Sequence[int],
        compute: RowsCompute,
        started: float,
        turns: Mapping[int, FleetTurn] | None = None,
    ) -> None:
        """Compute ``remaining`` in one call, counted as misses and inserted row by row
        (through the row's fleet turn when it has one: ``turns``)."""
        remaining = sorted(remaining)  # in the request's order, as ``compute`` expects them
        plan.series.row_misses.inc(len(remaining))
        lookup_s = time.perf_counter() - started
        since = self.marks.now()
        computed = await compute(remaining)
        for row, row_outputs in zip(remaining, computed, strict=True):
            turn = turns.get(row) if turns is not None else None
            self._store(keys[row], row_outputs, rows[row].ttl_s, since, plan.tiers, plan, turn)
            found[row] = (list(row_outputs), CacheStatus.MISS)
            self.metrics.triton.record(
                rows[row].model, rows[row].version, hit=False, duration_s=lookup_s
            )


def _finish_turn(asked: asyncio.Future[FleetTurn]) -> None:
    """A fleet turn nobody will compute for (its batch went away): give its lease back."""
    if not asked.cancelled() and asked.exception() is None:
        asked.result().finish()


class _Plan:
    """One request's decisions, made once by :meth:`ReadThroughCache._plan`."""

    __slots__ = (
        "_key", "_keyer", "admission", "bypass", "near", "request", "series", "store", "terms",
        "tiers",
    )  # fmt: skip

    def __init__(
        self,
        request: CacheRequest,
        series: ModelCacheMetrics,
        admission: ModelAdmission,
        keyer: Callable[[CacheRequest], CacheKey],
    ) -> None:
        self.request = request
        self._keyer = keyer
        self.series = series
        self.admission = admission
        #: The tiers this request uses, in order, and those of them in this process.
        self.tiers: list[TensorTier] = []
        self.near: list[TensorTier] = []
        #: Computed without a lookup; ``store``: and inserted all the same (``no-cache``).
        self.bypass = True
        self.store = False
        #: The scheduling terms its compute runs on (``terms``); None: the neutral ones.
        self.terms: Hashable | None = None
        self._key: CacheKey | None = None

    def of_row(self, row: CacheRequest) -> _Plan:
        """The same decisions for one row of this (batched) request."""
        plan = _Plan(row, self.series, self.admission, self._keyer)
        plan.tiers, plan.near, plan.bypass, plan.store, plan.terms = (
            self.tiers,
            self.near,
            self.bypass,
            self.store,
            self.terms,
        )
        return plan

    @property
    def neutral(self) -> bool:
        """Whether its compute runs on the neutral terms: only then may it take part in the
        fleet's coalescing, whose lease holder may be any replica's request."""
        return self.terms is None

    def flight_key(self, key: CacheKey) -> FlightKey:
        """The single-flight key of ``key`` (the request's, or a row's) on its terms."""
        return flight_key(key, self.terms)

    def key(self) -> CacheKey:
        """The request's key, made on first use."""
        if self._key is None:
            self._key = self._keyer(self.request)
        return self._key
