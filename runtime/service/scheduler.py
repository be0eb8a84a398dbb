"""Runs one model version's executions: at most ``instances`` at once, misses merged into
batches when the model asks for dynamic batching.

Executions run in the server's thread pool, off the event loop. (A ``quick`` model without
dynamic batching gets a scheduler of another kind, which runs them on the loop itself: see
``inline_scheduler``, chosen in ``schedulers``.) Every execution runs in its own task, so a
caller that goes away (a client disconnect cancels its request) never cancels an execution that
other callers wait on; a caller that goes before its request left the queue is simply dropped
from it. A batch that fails is run again one request at a time, so that a request the model
cannot run fails alone, with the model's error, and the others still get answers.

What of a request's parameters decides how it is queued (its priority level and queue timeout)
is its *terms* (:meth:`ModelScheduler.terms`), handed to the cache with its compute: identical
requests share a computation only on the same terms, and the errors of those terms (a full
queue, a queue timeout) are raised as ``SchedulingTermsError`` so that they stay the request's
own (see ``cache.terms``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Executor

from cachefleet.runtime.cache.api import Compute
from cachefleet.runtime.cache.terms import on_terms
from cachefleet.runtime.errors import (
    BadRequestError,
    ModelExecutionError,
    NotReadyError,
    QueueFullError,
    QueueTimeoutError,
    ServingError,
)
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.scheduling import SchedulingPolicy
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service import rows
from cachefleet.runtime.service.batch_queue import BatchQueue, Pending
from cachefleet.runtime.service.statistics import ExecutionTimes, StatisticsRegistry
from cachefleet.runtime.tensor import Tensor
from cachefleet.runtime.tracing.current import CURRENT, note_execution, serving_batch

logger = logging.getLogger(__name__)
#: Called when a request starts waiting for an execution (see InferenceService.answer).
OnWait = Callable[[], None]


class ModelScheduler:
    """The executions of one model version."""

    def __init__(
        self,
        model: Model,
        policy: SchedulingPolicy,
        executor: Executor,
        metrics: RuntimeMetrics,
        statistics: StatisticsRegistry,
    ) -> None:
        self.model = model
        self._statistics = statistics
        self.policy = policy
        self._executor = executor
        self._slots = asyncio.Semaphore(policy.instances)
        self._queue = BatchQueue(policy.batching) if policy.batching is not None else None
        self._arrived = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._running: set[asyncio.Task[None]] = set()
        #: Completion of the batch dispatched last (``preserve_ordering`` chains on it).
        self._tail: asyncio.Future[None] | None = None
        labels = (model.name, model.version)
        self._batch_sizes = metrics.batch_size.labels(*labels)
        self._inference_seconds = metrics.inference_seconds.labels(*labels)
        self._pending = metrics.pending_requests.labels(*labels)
        self._counters = metrics.inference
        self._preserve_ordering = policy.batching is not None and policy.batching.preserve_ordering

    async def run(
        self,
        inputs: Sequence[Tensor],
        priority: int = 0,
        on_wait: OnWait | None = None,
        timeout_us: int = 0,
    ) -> list[Tensor]:
        """The model's outputs for ``inputs`` (batched with other requests if configured).

        ``timeout_us``: the request's ``timeout`` parameter, which the queue policy of its
        priority level may let replace its default queue timeout (as in Triton)."""
        level = self._level(priority)
        if on_wait is not None:
            on_wait()
        if self._queue is None:
            return await self._run_alone(inputs)
        assert self.policy.batching is not None  # there is a queue
        queue_policy = self.policy.batching.queue_policy(level)
        limit = queue_policy.max_queue_size
        if limit and self._queue.waiting_at(level) >= limit:
            raise QueueFullError("Exceeds maximum queue size")  # Triton's words
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Tensor]] = loop.create_future()
        pending = Pending(
            inputs=inputs,
            rows=self._rows(inputs),
            signature=rows.signature(inputs),
            future=future,
            queued_at=loop.time(),
            level=level,
            submitted_ns=time.perf_counter_ns(),
            traced=CURRENT.get(),
        )
        self._queue.push(pending)
        self._pending.set(len(self._queue))
        self._arrived.set()
        if self._loop_task is None:
            # In a context of its own: the batcher serves every request, not the first one.
            self._loop_task = asyncio.create_task(
                self._batch_loop(self._queue), context=contextvars.Context()
            )
            self._loop_task.add_done_callback(self._loop_ended)
        timeout_s = queue_policy.timeout_s(timeout_us)
        timer = None
        if timeout_s:
            delay = queue_policy.delay_on_timeout
            timer = loop.call_later(timeout_s, self._timed_out, pending, delay)
        try:
            return await future
        except asyncio.CancelledError:
            # The caller has gone: its future is cancelled, so the queue drops it; wake the
            # batcher so that it does now, and not only when the next request comes.
            self._arrived.set()
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def compute(self, runs: Compute, terms: Hashable | None = None) -> Compute:
        """How the cache gets ``runs``, a compute that awaits one :meth:`run` and nothing else,
        on ``terms`` (:meth:`terms`): as ordinary work, since a run here waits (for an
        instance, a thread, the queue) and its caller may go while it does."""
        return on_terms(runs, terms)

    def terms(self, priority: int, timeout_us: int) -> Hashable | None:
        """How a request with these parameters is queued, as the cache compares requests
        that would share a computation (``cache.terms``): its priority level and queue timeout;
        None when they are those of a request that names neither (always, without a queue)."""
        batching = self.policy.batching
        if batching is None:
            return None
        level = self._level(priority)
        terms = (level, batching.queue_policy(level).timeout_s(timeout_us))
        neutral_level = self._level(0)
        neutral = (neutral_level, batching.queue_policy(neutral_level).timeout_s(0))
        return None if terms == neutral else terms

    def _timed_out(self, pending: Pending, delay: bool) -> None:
        """A request's queue timeout passed while it waited: refused, or moved behind the
        requests still in time (``timeout_action: DELAY``)."""
        if pending.taken or pending.future.done():
            return
        if delay:
            pending.delayed = True
        else:
            pending.future.set_exception(QueueTimeoutError("Request timeout expired"))
        self._arrived.set()

    async def close(self) -> None:
        """Stop batching: batches already running finish, requests still waiting get 503."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        await asyncio.gather(*self._running, return_exceptions=True)
        for pending in self._queue.drain() if self._queue is not None else ():
            if not pending.future.done():
                pending.future.set_exception(
                    NotReadyError(f"model {self.model.name!r} is no longer served here")
                )

    def _rows(self, inputs: Sequence[Tensor]) -> int:
        """Rows of a request: its batch size, or 1 for a model without a batch dimension."""
        return rows.batch_rows(inputs) if self.model.config.max_batch_size > 0 else 1

    def check_priority(self, priority: int) -> None:
        """Raise BadRequestError unless ``priority`` is a level of this model (or 0).

        Called before the cache is asked: a request's own mistake must fail that request
        alone, never an identical request that joined it in flight.
        """
        self._level(priority)

    def _level(self, priority: int) -> int:
        batching = self.policy.batching
        if batching is None or not batching.priority_levels:
            return 0
        if priority == 0:
            return batching.default_priority_level
        if not 0 < priority <= batching.priority_levels:
            raise BadRequestError(
                f"priority {priority} is not a level of model {self.model.name!r} "
                f"(1 to {batching.priority_levels}, or 0 for the default)"
            )
        return priority

    def _loop_ended(self, task: asyncio.Task[None]) -> None:
        """A batcher that died of a bug is logged and restarted by the next request."""
        if self._loop_task is task:
            self._loop_task = None
        if not task.cancelled() and task.exception() is not None:
            logger.error(
                "model %r: the batcher stopped", self.model.name, exc_info=task.exception()
            )

    async def _run_alone(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        submitted_ns = time.perf_counter_ns()
        await self._slots.acquire()
        task = asyncio.ensure_future(self._execute_one(inputs, submitted_ns))
        task.add_done_callback(lambda _: self._slots.release())
        return await asyncio.shield(task)

    async def _execute_one(self, inputs: Sequence[Tensor], submitted_ns: int) -> list[Tensor]:
        (outputs,) = await self._execute([inputs], submitted_ns)
        return outputs

    async def _batch_loop(self, queue: BatchQueue) -> None:
        """Wait for a free instance, then for a batch worth running, and start it."""
        loop = asyncio.get_running_loop()
        while True:
            await self._slots.acquire()
            try:
                batch = await self._next_batch(queue, loop)
            except BaseException:
                self._slots.release()
                raise
            task = asyncio.create_task(self._run_batch(batch, self._chain()))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _next_batch(
        self, queue: BatchQueue, loop: asyncio.AbstractEventLoop
    ) -> list[Pending]:
        while True:
            self._arrived.clear()
            taken = queue.take(loop.time())
            self._pending.set(len(queue))
            if isinstance(taken, list):
                return taken
            timeout = None if taken is None else max(0.0, taken - loop.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), timeout)

    def _chain(self) -> tuple[asyncio.Future[None] | None, asyncio.Future[None]]:
        """(completion of the previous batch, this batch's completion)."""
        previous, mine = self._tail, asyncio.get_running_loop().create_future()
        self._tail = mine
        return previous, mine

    async def _run_batch(
        self,
        batch: list[Pending],
        chain: tuple[asyncio.Future[None] | None, asyncio.Future[None]],
    ) -> None:
        previous, mine = chain
        serving_batch(pending.traced for pending in batch)  # this task's own context
        try:
            results = await self._results(batch)
        finally:
            self._slots.release()
        try:
            if previous is not None and self._preserve_ordering:
                await previous
            for pending, result in zip(batch, results, strict=True):
                if pending.future.done():
                    continue  # its caller has gone
                if isinstance(result, BaseException):
                    pending.future.set_exception(result)
                else:
                    pending.future.set_result(result)
        finally:
            mine.set_result(None)
            if self._tail is mine:
                self._tail = None

    async def _results(self, batch: list[Pending]) -> list[list[Tensor] | ServingError]:
        """Outputs per request; if the batch fails, each request again on its own."""
        try:
            submitted_ns = min(pending.submitted_ns for pending in batch)
            return list(await self._execute([pending.inputs for pending in batch], submitted_ns))
        except ServingError as error:
            if len(batch) == 1:
                return [error]
        except Exception as error:  # the executor itself failed (shut down): nothing can run
            failure = ModelExecutionError(f"model {self.model.name!r} cannot run: {error}")
            return [failure] * len(batch)
        logger.info(
            "model %r: a batch of %d requests failed; running them one by one",
            self.model.name,
            len(batch),
        )
        results: list[list[Tensor] | ServingError] = []
        for pending in batch:
            if pending.future.done():
                results.append(ModelExecutionError("the caller has gone"))
                continue
            serving_batch((pending.traced,))
            try:
                results.append(await self._execute_one(pending.inputs, pending.submitted_ns))
            except ServingError as error:
                results.append(error)
            except Exception as error:
                results.append(
                    ModelExecutionError(f"model {self.model.name!r} cannot run: {error}")
                )
        return results

    async def _execute(
        self, parts: Sequence[Sequence[Tensor]], submitted_ns: int
    ) -> list[list[Tensor]]:
        """One model execution over ``parts`` joined along dim 0, split back per part.

        Recorded for the statistics extension as one execution of all its rows: ``queue`` from
        the oldest part's arrival to the start, ``compute_input`` joining the inputs,
        ``compute_infer`` the model, ``compute_output`` cutting the outputs. It runs in a copy
        of this task's context (as ``asyncio.to_thread`` runs), so a model that calls out (an
        upstream's) finds the traced requests it serves (``tracing.current.served``).
        """
        loop = asyncio.get_running_loop()
        sizes = [self._rows(part) for part in parts]
        run = contextvars.copy_context().run
        pieces, times = await loop.run_in_executor(
            self._executor, run, self._execute_blocking, parts, sizes, submitted_ns
        )
        self._record(sum(sizes), times, len(parts))
        return pieces

    def _record(self, rows: int, times: ExecutionTimes, requests: int) -> None:
        """One execution of ``rows`` rows for ``requests`` requests, in the metrics and the
        statistics extension."""
        self._inference_seconds.observe(times.compute_infer_ns / 1e9)
        self._batch_sizes.observe(rows)
        self._counters.executed(self.model.name, self.model.version, rows)
        stats = self._statistics.for_version(self.model.name, self.model.version)
        stats.record_execution(rows, times, requests)
        # The request's span, when it is traced and this ran in its own task (a batch runs in
        # the batcher's, which belongs to no request).
        note_execution(
            times.queue_ns,
            times.compute_input_ns + times.compute_infer_ns + times.compute_output_ns,
        )

    def _execute_blocking(
        self, parts: Sequence[Sequence[Tensor]], sizes: Sequence[int], submitted_ns: int
    ) -> tuple[list[list[Tensor]], ExecutionTimes]:
        try:
            started = time.perf_counter_ns()
            joined = rows.join(parts)
            joined_at = time.perf_counter_ns()
            outputs = self.model.run(joined)
            ran_at = time.perf_counter_ns()
            pieces = rows.split(outputs, sizes)
        except ServingError:
            raise
        except Exception as error:
            raise ModelExecutionError(
                f"model {self.model.name!r} version {self.model.version} failed: {error}"
            ) from error
        times = ExecutionTimes(
            queue_ns=started - submitted_ns,
            compute_input_ns=joined_at - started,
            compute_infer_ns=ran_at - joined_at,
            compute_output_ns=time.perf_counter_ns() - ran_at,
        )
        return pieces, times
