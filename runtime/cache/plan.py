"""One request's decisions in the cache, made once and read by every later step.

:class:`Plan` is what the walk (``walk``) decides for a request before it looks anything up:
which tiers it uses (admission's verdicts), whether it bypasses the cache, the scheduling terms
its compute runs on, and its key (made on first use: a model whose every tier is skipped mostly
never needs it). The read-through path and the row path carry the plan instead of threading
each of these through their helpers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from cachefleet.runtime.cache.admission import ModelAdmission
from cachefleet.runtime.cache.api import CacheRequest, CacheStatus, RowHit, RowsCompute
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.metrics import ModelCacheMetrics
from cachefleet.runtime.cache.terms import FlightKey, flight_key
from cachefleet.runtime.cache.tier import Tier
from cachefleet.runtime.tensor import Tensor

#: What a computation shared by single-flight settles with: the outputs and how they came.
Outcome = tuple[list[Tensor], CacheStatus]


class Plan:
    """One request's decisions (see the module docstring)."""

    __slots__ = (
        "_key", "_keyer", "admission", "bypass", "near", "request", "series", "started",
        "store", "terms", "tiers",
    )  # fmt: skip

    def __init__(
        self,
        request: CacheRequest,
        series: ModelCacheMetrics,
        admission: ModelAdmission,
        keyer: Callable[[CacheRequest], CacheKey],
        started: float,
    ) -> None:
        self.request = request
        self._keyer = keyer
        self.series = series
        self.admission = admission
        #: ``time.perf_counter()`` when the request reached the cache: hits' and misses' times
        #: for Triton's counters run from here.
        self.started = started
        #: The tiers this request uses, in order, and those of them in this process.
        self.tiers: list[Tier] = []
        self.near: list[Tier] = []
        #: Computed without a lookup; ``store``: and inserted all the same (``no-cache``).
        self.bypass = True
        self.store = False
        #: The scheduling terms its compute runs on (``terms``); None: the neutral ones.
        self.terms: Hashable | None = None
        self._key: CacheKey | None = None

    def of_row(self, row: CacheRequest) -> Plan:
        """The same decisions for one row of this (batched) request."""
        plan = Plan(row, self.series, self.admission, self._keyer, self.started)
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

    def before(self, tier: Tier) -> list[Tier]:
        """The tiers of this plan that a request meets before ``tier`` (a promotion's)."""
        return self.tiers[: self.tiers.index(tier)]

    def shared(self) -> list[Tier]:
        """The tiers of this plan that every replica sees."""
        return [tier for tier in self.tiers if tier.shared]


class Batch:
    """A batched request's rows in the cache, carried through the row path: the plan they
    share (each row's own is :meth:`Plan.of_row`), their requests and keys, how each row has
    been answered so far, and the compute of the rows nobody holds."""

    __slots__ = ("compute", "found", "keys", "plan", "rows")

    def __init__(
        self,
        plan: Plan,
        rows: Sequence[CacheRequest],
        keys: Sequence[CacheKey],
        compute: RowsCompute,
    ) -> None:
        self.plan = plan
        self.rows = rows
        self.keys = keys
        self.compute = compute
        #: Each row's outputs and status once answered; None until then.
        self.found: list[RowHit | None] = [None] * len(rows)

    def answer(self, row: int, outputs: Sequence[Tensor], status: CacheStatus) -> None:
        self.found[row] = (list(outputs), status)

    def unanswered(self, rows: Sequence[int]) -> list[int]:
        return [row for row in rows if self.found[row] is None]
