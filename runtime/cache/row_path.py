"""The row cache's path through the tiers: a batched request answered row by row.

It takes the steps of a whole request (``read_through``) with many keys at once, on the same
walk (``walk``): the whole request's admission (its plan, decided once: the rows are not
judged again, so a batch earns its model's recompute credit once and is sampled on its own
key; a request the plan computes without the cache has its rows computed so too), the same
loop over tiers (one batched lookup per tier), the same single-flight per row key (the rows
nobody here is computing are led by the batch: the shared tiers, then one compute for all of
them; the others are waited for, counted as coalesced), the same counters (its own row
counters, and Triton's), the same inserts. A batch leads before it waits, so batches never
wait in a ring; a failed or cancelled leading batch sends its followers off to compute those
rows themselves (its error may be another row's).
With fleet coalescing, each led row takes its turn in the fleet as a whole request does (all
asked at once; the rows this replica is to compute run as their turns come, never held back by
a row it waits for).

A batch's state (its rows, keys, what answered each, its compute) travels as one
:class:`~cachefleet.runtime.cache.plan.Batch`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from cachefleet.runtime.cache.api import (
    CacheDirectives,
    CacheRequest,
    CacheStatus,
    RowHit,
    RowsCompute,
)
from cachefleet.runtime.cache.fleet import FleetTurn
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.plan import Batch, Outcome, Plan
from cachefleet.runtime.cache.singleflight import SingleFlight
from cachefleet.runtime.cache.terms import terms_of
from cachefleet.runtime.cache.walk import TierWalk

#: The rows a batch leads, by key: the rows holding that key, and the flight it settles.
_Led = dict[CacheKey, tuple[list[int], "asyncio.Future[Outcome]"]]


class RowPath:
    """Answers batched requests row by row over one cache's walk and single-flight."""

    def __init__(self, walk: TierWalk, flight: SingleFlight[Outcome]) -> None:
        self.walk = walk
        self.flight = flight

    async def answer(
        self, rows: Sequence[CacheRequest], compute: RowsCompute, started: float
    ) -> list[RowHit]:
        """Each row from the first in-process tier that holds it; else, once per key in this
        process (single-flight, per row), from the shared tiers, else computed (all the rows
        this batch leads in one call) and inserted like any answer. A row another request is
        computing waits for it, and is counted as coalesced, as a whole request is. The rows
        go by their batched request's plan (:meth:`_plan`), never judged by admission again."""
        if not rows:
            return []
        walk = self.walk
        plan = self._plan(rows[0], started)
        if plan.bypass:  # its request is computed without the cache: so are its rows
            computed = await compute(range(len(rows)))
            return [(list(outputs), CacheStatus.MISS) for outputs in computed]
        plan.terms = terms_of(compute)
        batch = Batch(plan, rows, [walk.key(row) for row in rows], compute)
        missing = await walk.first_hits(batch, plan.near, range(len(rows)))
        while missing:  # rows whose leader gave up go round again
            missing = await self._fill(batch, missing)
        return [each for each in batch.found if each is not None]

    def _plan(self, first: CacheRequest, started: float) -> Plan:
        """The rows' plan: the decision already made for the batched request whose compute
        this is (its tiers, its recompute and its sample, drawn on the request's key), or, for
        rows asked for on their own, a decision made now."""
        whole = self.walk.computing()
        if whole is None or (whole.request.model, whole.request.version) != (
            first.model,
            first.version,
        ):
            return self.walk.plan(first, CacheDirectives(), started)
        plan = whole.of_row(first)
        plan.started = started  # the rows' lookups are timed from here, as their own
        return plan

    async def _fill(self, batch: Batch, missing: Sequence[int]) -> list[int]:
        """One round for the rows no in-process tier held: lead the keys nobody here is
        computing, then wait for the others'. Returns the rows whose leader gave up."""
        plan = batch.plan
        by_key: dict[CacheKey, list[int]] = {}
        for row in missing:
            by_key.setdefault(batch.keys[row], []).append(row)
        led: _Led = {}
        followed: list[tuple[list[int], asyncio.Future[Outcome]]] = []
        for key, group in by_key.items():
            flight = self.flight.current(plan.flight_key(key))
            if flight is None:
                led[key] = (group, self.flight.claim(plan.flight_key(key)))
            else:
                followed.append((group, flight))
        if led:  # first, so that no leader waits on a follower: batches never wait in a ring
            await self._lead(batch, led)
        gave_up: list[int] = []
        for group, flight in followed:
            outcome = await self.flight.follow(flight)
            if outcome is None:
                gave_up.extend(group)
                continue
            plan.series.row_coalesced.inc(len(group))
            for row in group:
                batch.answer(row, outcome[0], outcome[1])
        return gave_up

    async def _lead(self, batch: Batch, led: _Led) -> None:
        """The rows this batch leads, one per key: the shared tiers, then one compute of the
        rest. Each key's followers get its answer; if the compute fails or is cancelled they
        start over on their own, since the failure may be another row's of this batch."""
        plan, walk = batch.plan, self.walk
        try:
            heads = [group[0] for group, _ in led.values()]
            remaining = await walk.first_hits(batch, plan.shared(), heads)
            fleet = walk.fleet
            if remaining and fleet is not None and fleet.tier in plan.tiers and plan.neutral:
                await self._fleet(batch, remaining)
            elif remaining:
                await self._computed(batch, remaining)
        except BaseException:
            for key, (_, flight) in led.items():
                self.flight.abandon(plan.flight_key(key), flight)
            raise
        for key, (group, flight) in led.items():
            outcome = batch.found[group[0]]
            assert outcome is not None  # every head was looked up or computed
            if len(group) > 1:  # the same row twice in one batch: computed once
                plan.series.row_coalesced.inc(len(group) - 1)
                for row in group[1:]:
                    batch.answer(row, outcome[0], outcome[1])
            self.flight.settle(plan.flight_key(key), flight, outcome)

    async def _fleet(self, batch: Batch, remaining: Sequence[int]) -> None:
        """The fleet's turn of each row (all asked at once): a row another replica computed is
        a hit of the fleet's tier; the rows this replica is to compute are computed as their
        turns come (those that come together in one call), never held back by a row it waits
        for: replicas never wait for each other in a ring."""
        plan, walk = batch.plan, self.walk
        since = walk.marks.now()
        asked: dict[asyncio.Future[FleetTurn], int] = {
            asyncio.ensure_future(walk.fleet_turn(plan, batch.keys[row])): row for row in remaining
        }
        pending: set[asyncio.Future[FleetTurn]] = set(asked)
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                turns = {asked[each]: each.result() for each in done}
                ours = {row: turn for row, turn in turns.items() if turn.filled is None}
                for row, turn in turns.items():
                    if turn.filled is not None:
                        outputs, status = walk.fleet_filled(
                            plan.of_row(batch.rows[row]),
                            batch.keys[row],
                            turn.filled,
                            since,
                            plan.series.row_hits,
                        )
                        batch.answer(row, outputs, status)
                try:
                    if ours:
                        await self._computed(batch, list(ours), ours)
                finally:
                    for turn in ours.values():
                        turn.finish()
        finally:
            for each in pending:  # this batch failed or went away: the fleet goes on without it
                each.cancel()
                each.add_done_callback(_finish_turn)

    async def _computed(
        self, batch: Batch, remaining: Sequence[int], turns: Mapping[int, FleetTurn] | None = None
    ) -> None:
        """Compute ``remaining`` in one call, counted as misses and inserted row by row
        (through the row's fleet turn when it has one: ``turns``)."""
        plan, walk = batch.plan, self.walk
        remaining = sorted(remaining)  # in the request's order, as ``compute`` expects them
        plan.series.row_misses.inc(len(remaining))
        lookup_s = time.perf_counter() - plan.started
        since = walk.marks.now()
        computed = await batch.compute(remaining)
        for row, row_outputs in zip(remaining, computed, strict=True):
            request = batch.rows[row]
            turn = turns.get(row) if turns is not None else None
            walk.store(plan.of_row(request), batch.keys[row], row_outputs, since, turn=turn)
            batch.answer(row, row_outputs, CacheStatus.MISS)
            walk.metrics.triton.record(
                request.model, request.version, hit=False, duration_s=lookup_s
            )


def _finish_turn(asked: asyncio.Future[FleetTurn]) -> None:
    """A fleet turn nobody will compute for (its batch went away): give its lease back."""
    if not asked.cancelled() and asked.exception() is None:
        asked.result().finish()
