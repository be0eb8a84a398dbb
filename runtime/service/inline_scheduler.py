"""The scheduler of a quick model without dynamic batching: each run at once, on the event loop.

For a model that runs quicker than a thread hand-off (``models.placement`` times it at load),
the hand-off and a task per miss would cost more than the run itself; with no dynamic batching
there is no queue to wait in either. So a run happens right in the caller's task, and once it
starts nothing in it waits or can be cancelled. The compute handed to the cache says so by its
type (:class:`~cachefleet.runtime.cache.completion.RunsToCompletion`), and the cache's
single-flight then leads a miss in the caller's task too. Chosen once per model version, where
its scheduler is made (``schedulers``); every other model has the ordinary
:class:`~cachefleet.runtime.service.scheduler.ModelScheduler`.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

from cachefleet.runtime.cache.api import Compute
from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.models.scheduling import SchedulingPolicy
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service.scheduler import ModelScheduler, OnWait
from cachefleet.runtime.tensor import Tensor


class InlineScheduler(ModelScheduler):
    """The executions of one quick model version without dynamic batching."""

    @staticmethod
    def suits(model: Model, policy: SchedulingPolicy) -> bool:
        """Whether ``model`` under ``policy`` is run here (or by the ordinary scheduler)."""
        return model.quick and policy.batching is None

    async def run(
        self,
        inputs: Sequence[Tensor],
        priority: int = 0,
        on_wait: OnWait | None = None,
        timeout_us: int = 0,
    ) -> list[Tensor]:
        """The model's outputs for ``inputs``, run now. Without a queue there is no priority
        level or queue timeout to apply, and no wait to report: ``on_wait`` is not called."""
        size = self._rows(inputs)
        (outputs,), times = self._execute_blocking([inputs], [size], time.perf_counter_ns())
        self._record(size, times, 1)
        return outputs

    def compute(self, runs: Compute, terms: Hashable | None = None) -> Compute:
        """``runs`` marked as running to completion: a run here never waits once started
        (and, with no queue, its terms are always the neutral ones)."""
        return RunsToCompletion(runs)
