"""The schedulers of the loaded model versions, and the one place where each one's kind is
chosen: the :class:`~cachefleet.runtime.service.inline_scheduler.InlineScheduler` when it suits
the model, else the ordinary :class:`~cachefleet.runtime.service.scheduler.ModelScheduler`."""

from __future__ import annotations

import asyncio
from concurrent.futures import Executor

from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.scheduling import SchedulingPolicy, scheduling_policy
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service.inline_scheduler import InlineScheduler
from cachefleet.runtime.service.scheduler import ModelScheduler
from cachefleet.runtime.service.statistics import StatisticsRegistry


def build_scheduler(
    model: Model,
    policy: SchedulingPolicy,
    executor: Executor,
    metrics: RuntimeMetrics,
    statistics: StatisticsRegistry,
) -> ModelScheduler:
    """The scheduler of ``model`` under ``policy``, of the kind that suits it."""
    kind = InlineScheduler if InlineScheduler.suits(model, policy) else ModelScheduler
    return kind(model, policy, executor, metrics, statistics)


class Schedulers:
    """One :class:`ModelScheduler` per model version, made on first use."""

    def __init__(
        self, executor: Executor, metrics: RuntimeMetrics, statistics: StatisticsRegistry
    ) -> None:
        self._executor = executor
        self._metrics = metrics
        self._statistics = statistics
        self._schedulers: dict[tuple[str, str], ModelScheduler] = {}
        self._retiring: set[asyncio.Future[None]] = set()

    def of(self, model: Model) -> ModelScheduler:
        key = (model.name, model.version)
        scheduler = self._schedulers.get(key)
        if scheduler is None or scheduler.model is not model:
            if scheduler is not None:  # the model was loaded again: retire the old batcher
                retiring = asyncio.ensure_future(scheduler.close())
                self._retiring.add(retiring)
                retiring.add_done_callback(self._retiring.discard)
            policy = scheduling_policy(model.config)
            scheduler = build_scheduler(
                model, policy, self._executor, self._metrics, self._statistics
            )
            self._schedulers[key] = scheduler
        return scheduler

    def get(self, name: str, version: str) -> ModelScheduler | None:
        """The scheduler of a model version that has run at least once, else None."""
        return self._schedulers.get((name, version))

    async def release(self, name: str) -> None:
        """Close and forget the schedulers of model ``name`` (unloaded, or loaded again), so
        that nothing here keeps its sessions alive; a later request makes a new one."""
        doomed = [key for key in self._schedulers if key[0] == name]
        schedulers = [self._schedulers.pop(key) for key in doomed]
        await asyncio.gather(*(scheduler.close() for scheduler in schedulers))

    async def close(self) -> None:
        schedulers, self._schedulers = list(self._schedulers.values()), {}
        await asyncio.gather(*(scheduler.close() for scheduler in schedulers), *self._retiring)
