"""The one walk over the tiers, shared by a request (``read_through``) and a batch's rows
(``row_path``): plan, look up in order, count, promote, compute, insert.

A request's plan is decided once (:meth:`TierWalk.plan`): admission's per-tier verdicts, or a
bypass; a batched request's rows take their request's plan (:meth:`TierWalk.computing`). What
does not change from one request of a model version to the next (its metric children, its
admission figures, each tier's judge) is bound once per model version (:class:`ModelWalk`), so
that a request pays only the verdicts themselves: a model whose every tier is skipped (a cheap
model, or one whose requests never repeat) pays about what ``--cache none`` does.
Then the tiers it uses are looked up in turn, one key at a time (:meth:`TierWalk.first_hit`)
or a batch's rows at once (:meth:`TierWalk.first_hits`, one batched lookup per tier); either
way each lookup is timed, counted and told to admission in one place
(:meth:`TierWalk.looked_up`), and a hit in a later tier is promoted to the earlier ones
(:meth:`TierWalk.promote`). A computed answer is timed for admission
(:meth:`TierWalk.computed`) and inserted into every tier the request uses
(:meth:`TierWalk.store`), unless a flush of its model began since (``flush_marks``). A shared
tier's miss may take a turn in the fleet (:meth:`TierWalk.fleet_turn`).

Nothing here names a tier: what a tier is, is data on it (``tier.Tier``: ``name``,
``shared``), and a hit's ``X-Cache`` value is made from its name.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextvars import ContextVar

from prometheus_client import Counter

from cachefleet.runtime.cache.admission import AdmissionPolicy, ModelAdmission, TierAdmission
from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus, Compute
from cachefleet.runtime.cache.fleet import FleetTurn, SharedFleet
from cachefleet.runtime.cache.flush_marks import FlushMarks
from cachefleet.runtime.cache.key import CacheKey, compute_key
from cachefleet.runtime.cache.metrics import CacheMetrics, ModelCacheMetrics
from cachefleet.runtime.cache.plan import Batch, Outcome, Plan
from cachefleet.runtime.cache.tier import Found, Tier
from cachefleet.runtime.metrics import PlainCounter, RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

#: The plan of the request whose compute is running in this context (set by
#: :meth:`TierWalk.computed` for the time it awaits the compute). A batched request's compute is
#: the row path (``row_path``), which reads it to take the whole request's decision for its rows
#: rather than deciding again; a context variable because the compute is the service's, called
#: with no arguments, and the row path is reached through it (``service.row_cache``).
_COMPUTING: ContextVar[Plan | None] = ContextVar("cachefleet_cache_computing", default=None)


class ModelWalk:
    """What every request of one model version reads in the walk, bound once: its metric
    children, its admission figures, and each tier with its judge, in order."""

    __slots__ = ("admission", "judges", "series")

    def __init__(
        self, series: ModelCacheMetrics, admission: ModelAdmission, tiers: Sequence[Tier]
    ) -> None:
        self.series = series
        self.admission = admission
        self.judges: tuple[tuple[Tier, TierAdmission], ...] = tuple(
            (tier, admission.tier(tier.name)) for tier in tiers
        )


class TierWalk:
    """The tiers of one cache in order, and the steps every lookup and insert takes."""

    def __init__(
        self,
        metrics: RuntimeMetrics,
        tiers: Sequence[Tier],
        model_metrics: CacheMetrics,
        marks: FlushMarks,
        admission: AdmissionPolicy,
        fleet: SharedFleet | None,
    ) -> None:
        self.metrics = metrics
        self.tiers = tuple(tiers)
        self.model_metrics = model_metrics
        self.marks = marks
        self.admission = admission
        self.fleet = fleet
        #: The ``X-Cache`` value of a hit in each tier (``hit-<name>``).
        self._hits = {id(tier): CacheStatus.hit(tier.name) for tier in self.tiers}
        #: By model and version (see :class:`ModelWalk`).
        self._models: dict[tuple[str, str], ModelWalk] = {}

    def hit_status(self, tier: Tier) -> CacheStatus:
        return self._hits[id(tier)]

    def plan(self, request: CacheRequest, directives: CacheDirectives, started: float) -> Plan:
        """Which tiers ``request`` uses, decided once: admission's per-tier verdicts (a tier
        that costs this model more than it saves is skipped, but for a sample that keeps it
        measured), or a bypass. The key is made only once a tier needs it: a model whose every
        tier is skipped mostly never does."""
        names = (request.model, request.version)
        model = self._models.get(names)
        if model is None or model.admission.forgotten:
            model = self._bind(names)
        admission = model.admission
        plan = Plan(request, model.series, admission, self.key, started)
        if not request.enabled or not directives.lookup:
            plan.store = request.enabled and directives.store
            return plan
        if admission.recomputes():  # refreshes what a hit saves (see ``admission.py``)
            return plan
        sampled: bool | None = None
        for tier, judge in model.judges:
            if not judge.admitted:
                if sampled is None:
                    sampled = admission.in_sample(request.inputs, plan.key)
                if not judge.wants(sampled):
                    continue
            plan.tiers.append(tier)
            if not tier.shared:
                plan.near.append(tier)
        plan.bypass = not plan.tiers  # every tier skipped: what ``--cache none`` does
        return plan

    def _bind(self, names: tuple[str, str]) -> ModelWalk:
        """Bind (again, once admission has forgotten the figures bound before) what the
        requests of the model version ``names`` read (:class:`ModelWalk`)."""
        model = self._models[names] = ModelWalk(
            self.model_metrics.of(*names), self.admission.of(*names), self.tiers
        )
        return model

    @staticmethod
    def key(request: CacheRequest) -> CacheKey:
        """The request's cache key (``key``); an attribute, so a profile can wrap it."""
        return compute_key(
            request.model, request.version, request.fingerprint, request.inputs, request.parameters
        )

    # -- lookups ----------------------------------------------------------------------------

    async def first_hit(
        self, plan: Plan, tiers: Sequence[Tier], *, from_start: bool = False
    ) -> tuple[Tier, Found] | None:
        """Look each of ``tiers`` up in turn for the request's key (a tier that cannot be
        asked now is passed over, uncounted); the first hit is promoted to the earlier tiers
        of the plan. The first lookup is timed from the request's start when ``from_start``
        (so that it includes the key)."""
        key = plan.key()
        first_from = plan.started if from_start else None
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
            self.looked_up(plan, tier, now - began, found is not None)
            if found is not None:
                self.metrics.triton.record(
                    plan.request.model,
                    plan.request.version,
                    hit=True,
                    duration_s=now - plan.started,
                )
                if since:
                    self.promote(plan, key, found, plan.before(tier), since)
                return tier, found
        return None

    async def first_hits(
        self, batch: Batch, tiers: Sequence[Tier], rows: Sequence[int]
    ) -> list[int]:
        """The same walk for many rows of ``batch`` (one batched lookup per tier), counted as
        :meth:`first_hit` counts; returns the rows none of ``tiers`` held."""
        plan, remaining = batch.plan, list(rows)
        for tier in tiers:
            if not remaining:
                break
            since = self.marks.now()
            began = time.perf_counter()
            answers = tier.lookup_many([batch.keys[i] for i in remaining])
            if not isinstance(answers, list):
                answers = await answers
            elapsed = time.perf_counter() - began
            plan.series.lookup[tier.name].observe(elapsed)
            judge = plan.admission.tier(tier.name)
            earlier = plan.before(tier)
            held = 0
            for row, answer in zip(remaining, answers, strict=True):
                judge.looked_up(elapsed / len(remaining), answer is not None)
                if answer is None:
                    continue
                held += 1
                request = batch.rows[row]
                batch.answer(row, answer.outputs, self._hits[id(tier)])
                self.metrics.triton.record(
                    request.model, request.version, hit=True, duration_s=elapsed
                )
                self.promote(plan.of_row(request), batch.keys[row], answer, earlier, since)
            plan.series.row_hits[tier.name].inc(held)
            remaining = batch.unanswered(remaining)
        return remaining

    def looked_up(self, plan: Plan, tier: Tier, elapsed_s: float, hit: bool) -> None:
        """Count one lookup of ``tier``: the one place a request's lookups are timed and its
        hits counted."""
        plan.series.lookup[tier.name].observe(elapsed_s)
        plan.admission.tier(tier.name).looked_up(elapsed_s, hit)
        if hit:
            plan.series.hits[tier.name].inc()

    def confirm(self, tier: Tier, key: CacheKey, identity: object, started_ns: int) -> int | None:
        """A :class:`~cachefleet.runtime.cache.api.LocalEntryToken`'s check: the entry still
        lives, and counts a hit as a lookup of its tier does."""
        if tier.entry(key) is not identity:
            return None
        now_ns = time.perf_counter_ns()
        elapsed = (now_ns - started_ns) / 1e9
        series = self.model_metrics.of(key.model, key.version)
        series.lookup[tier.name].observe(elapsed)
        series.hits[tier.name].inc()
        self.metrics.triton.record(key.model, key.version, hit=True, duration_s=elapsed)
        return now_ns

    # -- the fleet --------------------------------------------------------------------------

    async def fleet_turn(self, plan: Plan, key: CacheKey) -> FleetTurn:
        """Where this process's one computation of ``key`` is about to start: the fleet may
        answer it, or let this replica compute (``fleet``). Only a request that uses the
        fleet's tier, on the neutral terms, takes a turn (a lease holder's computation runs
        on the neutral terms)."""
        fleet = self.fleet
        if fleet is None or fleet.tier not in plan.tiers or not plan.neutral:
            return FleetTurn(key)
        return await fleet.turn(key)

    def fleet_filled(
        self,
        plan: Plan,
        key: CacheKey,
        found: Found,
        since: float,
        hits: dict[str, Counter] | dict[str, PlainCounter],
    ) -> Outcome:
        """An answer another replica computed while this one waited for its turn: a hit of
        the fleet's tier (``hits``: the request's counters or the row counters), promoted."""
        assert self.fleet is not None  # only the fleet fills
        tier, request = self.fleet.tier, plan.request
        hits[tier.name].inc()
        self.metrics.triton.record(
            request.model, request.version, hit=True, duration_s=time.perf_counter() - plan.started
        )
        self.promote(plan, key, found, plan.before(tier), since)
        return found.outputs, self._hits[id(tier)]

    # -- computes and inserts ---------------------------------------------------------------

    async def computed(self, plan: Plan, compute: Compute) -> list[Tensor]:
        """Compute, and tell admission how long it took (what a hit would save): every compute
        of a cached model, bypass or miss, is timed here."""
        if plan.bypass:
            plan.series.bypass.inc()
        began = time.perf_counter()
        computing = _COMPUTING.set(plan)
        try:
            outputs = await compute()
        finally:
            _COMPUTING.reset(computing)
        plan.admission.computed(time.perf_counter() - began)
        return outputs

    @staticmethod
    def computing() -> Plan | None:
        """The plan of the request whose compute is running here (None: none is): what a
        batched request's rows are answered on (``row_path``)."""
        return _COMPUTING.get()

    def promote(
        self, plan: Plan, key: CacheKey, found: Found, tiers: Sequence[Tier], since: float
    ) -> None:
        """Keep a later tier's answer in the earlier ``tiers`` too, unless a flush of the model
        began since it was read, for no longer than the entry it copies has left."""
        if not tiers or self.marks.stale(key.model, since):
            return
        ttl_s = plan.request.ttl_s if found.ttl_s is None else found.ttl_s
        if found.ttl_s is None or ttl_s > 0:
            self.insert_into(plan, tiers, key, found.outputs, ttl_s)

    def store(
        self,
        plan: Plan,
        key: CacheKey,
        outputs: Sequence[Tensor],
        since: float,
        *,
        tiers: Sequence[Tier] | None = None,
        turn: FleetTurn | None = None,
    ) -> None:
        """Insert a fresh answer computed since ``since`` into the plan's tiers (or
        ``tiers``) for the request's TTL: in-process ones at once, shared ones behind the
        response (or, for a fleet lease's holder, at once and then announced: ``turn``)."""
        if self.marks.stale(key.model, since):
            return  # computed before a flush of its model: it may be stale
        tiers = plan.tiers if tiers is None else tiers
        ttl_s = plan.request.ttl_s
        fleet = self.fleet
        if (
            fleet is not None
            and turn is not None
            and fleet.tier in tiers
            and turn.hand_over(fleet.write(key, outputs, ttl_s))
        ):
            tiers = [tier for tier in tiers if tier is not fleet.tier]
        self.insert_into(plan, tiers, key, outputs, ttl_s)

    def insert_into(
        self,
        plan: Plan,
        tiers: Sequence[Tier],
        key: CacheKey,
        outputs: Sequence[Tensor],
        ttl_s: float,
    ) -> None:
        """The one place answers go into tiers: each in-process insert timed for admission
        and counted (a shared tier counts its own once its store has it)."""
        admission, series = plan.admission, plan.series
        for tier in tiers:
            began = time.perf_counter()
            kept = tier.insert(key, outputs, ttl_s)
            if not tier.shared:
                admission.tier(tier.name).inserted(time.perf_counter() - began)
                if kept:
                    series.inserts[tier.name].inc()
