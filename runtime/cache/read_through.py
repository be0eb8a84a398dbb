"""The read-through response cache: its tiers in order, then the model; writes behind.

One class serves every mode: it holds the tiers ``factory`` lists, in the order a request meets
them (in-process ones first, then the shared ones), each a
:class:`~cachefleet.runtime.cache.tier.Tier`, and never names one. A request takes the walk of
``walk``:

1. decides once which tiers it uses (``admission``; a model whose tiers all cost more than they
   save skips them), and whether it bypasses the cache (not enabled for the model,
   ``no-cache``/``no-store``, or admission re-measuring the model): a bypass computes, timed
   and counted like any compute, status ``bypass``;
2. looks its in-process tiers up in turn (:meth:`~cachefleet.runtime.cache.walk.TierWalk.first_hit`,
   the one loop over tiers: each lookup timed, counted and told to admission the same way); a
   hit is ``hit-<tier>``;
3. otherwise, once per key in this process (single-flight), looks up the shared tiers with the
   same loop, then asks the fleet (``fleet``: one computation per key in the fleet), then
   computes, ``miss``. A hit in a later tier is promoted to the earlier ones; a computed answer
   is inserted into every tier the request uses (a shared tier's insert goes behind the
   response, or, for a fleet lease's holder, at once).

The row cache (:meth:`ReadThroughCache.get_rows_or_compute`) takes the same walk with many
keys at once (``row_path``).

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

import functools
import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from cachefleet.runtime.cache.admission import AdmissionPolicy
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
from cachefleet.runtime.cache.fleet import SharedFleet
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.metrics import CacheMetrics
from cachefleet.runtime.cache.plan import Outcome, Plan
from cachefleet.runtime.cache.row_path import RowPath
from cachefleet.runtime.cache.singleflight import SingleFlight
from cachefleet.runtime.cache.terms import terms_of
from cachefleet.runtime.cache.tier import Kept, Tier, flushed
from cachefleet.runtime.cache.walk import TierWalk
from cachefleet.runtime.cache.writebehind import WriteBehind
from cachefleet.runtime.metrics import RuntimeMetrics

if TYPE_CHECKING:  # redis-py is imported only by servers that use Redis (see factory.py)
    from cachefleet.runtime.cache.invalidation import InvalidationListener

logger = logging.getLogger(__name__)

#: Makes the flush listener, given what to call for each flush another replica announces.
Listen = Callable[[Callable[[str], None]], "InvalidationListener"]


class ReadThroughCache:
    """A :class:`~cachefleet.runtime.cache.api.ResponseCache` over its tiers."""

    def __init__(
        self,
        metrics: RuntimeMetrics,
        tiers: Sequence[Tier],
        *,
        cache_metrics: CacheMetrics | None = None,
        marks: FlushMarks | None = None,
        admission: AdmissionPolicy | None = None,
        writes: WriteBehind | None = None,
        fleet: SharedFleet | None = None,
        listen: Listen | None = None,
        front: Sequence[Kept] = (),
    ) -> None:
        """``tiers``: in the order a request meets them, the in-process ones first, then
        those every replica shares (looked up once per key: single-flight), on one of which
        the fleet may coalesce (``fleet``); ``writes``: the write-behind queue the shared
        tiers' inserts go through (started and closed here); ``front``: what keeps answers in
        front of this cache (the memo of rendered answers), which the transports consult and
        this cache flushes with the tiers; ``listen``: makes the listener that drops this
        replica's copies when another replica flushes a model; ``admission``: which tiers
        each model uses (by default every tier, always)."""
        self.metrics = metrics
        self.tiers = tuple(tiers)
        self.near = tuple(tier for tier in self.tiers if not tier.shared)
        self.shared = tuple(tier for tier in self.tiers if tier.shared)
        names = tuple(tier.name for tier in self.tiers)
        self.model_metrics = cache_metrics or CacheMetrics(metrics, names)
        self.front = tuple(front)
        self.marks = marks or FlushMarks()
        self.admission = admission or AdmissionPolicy("always", names)
        self.fleet = fleet
        self.listener = listen(self.drop_near) if listen is not None else None
        #: The shared tiers' write-behind queue (what tests and profiles wait on to drain);
        #: without one, a queue nothing is ever written to.
        self.writes = writes if writes is not None else WriteBehind(1)
        self._owns_writes = writes is not None
        self.walk = TierWalk(
            metrics, self.tiers, self.model_metrics, self.marks, self.admission, fleet
        )
        #: By key and terms: requests share a computation only on the same terms (``terms``).
        self._flight: SingleFlight[Outcome] = SingleFlight()
        self.rows = RowPath(self.walk, self._flight)
        #: Each in-process tier's check of its liveness tokens, bound once.
        self._confirms = {
            id(tier): functools.partial(self.walk.confirm, tier) for tier in self.near
        }

    async def start(self) -> None:
        for tier in self.tiers:
            await tier.start()
        if self._owns_writes:
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
        if self._owns_writes:
            await self.writes.close()
        for tier in reversed(self.tiers):
            await tier.close()

    async def get_or_compute(
        self, request: CacheRequest, directives: CacheDirectives, compute: Compute
    ) -> CacheAnswer:
        walk = self.walk
        plan = walk.plan(request, directives, time.perf_counter())
        if plan.bypass:
            since = self.marks.now() if plan.store else 0.0  # only a store reads it
            outputs = await walk.computed(plan, compute)
            if plan.store:
                walk.store(plan, plan.key(), outputs, since, tiers=self.tiers)
            return CacheAnswer(outputs, CacheStatus.BYPASS)
        hit = await walk.first_hit(plan, plan.near, from_start=True)
        if hit is not None:
            tier, found = hit
            token = None
            if found.identity is not None:
                token = LocalEntryToken(plan.key(), found.identity, self._confirms[id(tier)])
            return CacheAnswer(found.outputs, walk.hit_status(tier), token)
        plan.terms = terms_of(compute)  # only a miss is shared: a hit never reads them
        key = plan.flight_key(plan.key())
        if key in self._flight:
            # Counted apart from hits and misses: those count what the tiers and the model did,
            # once per key, and this request made neither do anything.
            plan.series.coalesced.inc()
        # The fill's last await is ``compute``: if that runs to completion once started (the
        # single-flight then leads it in this task), so does the fill.
        fill = passed_on(compute, lambda: self._fill(plan, directives.store, compute))
        outputs, status = await self._flight.do(key, fill)
        return CacheAnswer(list(outputs), status)

    async def _fill(self, plan: Plan, store: bool, compute: Compute) -> Outcome:
        """A miss of every in-process tier, once per key here: the shared tiers, the fleet,
        then the model."""
        walk, request, key = self.walk, plan.request, plan.key()
        shared = plan.shared()
        hit = await walk.first_hit(plan, shared) if shared else None
        if hit is not None:
            return hit[1].outputs, walk.hit_status(hit[0])
        lookup_s = time.perf_counter() - plan.started
        since = self.marks.now()
        turn = await walk.fleet_turn(plan, key)
        if turn.filled is not None:  # another replica computed it
            return walk.fleet_filled(plan, key, turn.filled, since, plan.series.hits)
        plan.series.misses.inc()
        since = self.marks.now()
        try:
            outputs = await walk.computed(plan, compute)
            insert_started = time.perf_counter()
            if store:
                walk.store(plan, key, outputs, since, turn=turn)
        finally:
            turn.finish()
        insert_s = time.perf_counter() - insert_started
        self.metrics.triton.record(
            request.model, request.version, hit=False, duration_s=lookup_s + insert_s
        )
        return outputs, CacheStatus.MISS

    async def flush(self, model: str) -> int:
        """Drop ``model`` from every tier (and tell the other replicas, through the shared
        tiers). Raises :class:`CacheTierError` when a tier cannot be flushed: unlike a lookup,
        a flush that silently did nothing would leave stale answers in place."""
        self.marks.mark(model)
        removed = 0
        try:
            for tier in (*self.front, *self.tiers):
                removed += await flushed(tier, model)
        finally:
            # Copies promoted while the shared tiers were walked go too (see the docstring).
            if self.shared:
                self.drop_near(model)
        logger.info("cache: flushed %d entries of model %r", removed, model)
        return removed

    def drop_near(self, model: str) -> None:
        """Another replica flushed ``model`` (or this one's flush walked the shared tiers):
        forget this replica's copies, and keep none read before now."""
        self.marks.mark(model)
        for tier in self.near:
            tier.flush(model)

    async def get_rows_or_compute(
        self, rows: Sequence[CacheRequest], compute: RowsCompute
    ) -> list[RowHit]:
        """Each row from the first tier that holds it, else computed (``row_path``)."""
        return await self.rows.answer(rows, compute, time.perf_counter())
