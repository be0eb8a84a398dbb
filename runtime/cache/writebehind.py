"""Write-behind: cache writes run after the response has gone, through a bounded queue.

A full queue drops the write (the caller counts it): under a Redis slowdown the cache loses some
inserts instead of holding memory or adding latency to requests. The queue is bounded in jobs and in
bytes (each job says what it holds: an insert, its answer's tensors), and a job's bytes count until
it has run, so large answers cannot pile up behind a slow Redis. A few workers drain the queue so
one slow write does not hold up the rest. A worker takes everything queued (up to ``batch`` jobs)
and starts it at once, so the Redis writes of one drain leave together in one pipelined round trip
(see ``batch``) instead of one round trip each. A job may return a plain future (the cache's inserts
and deletes do: they queue their command and return): it is waited for as it is, while a coroutine
needs a task of its own to run beside the others, and so starts after every future-returning job of
its drain; a write whose order matters returns a future.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger(__name__)
Job = Callable[[], Awaitable[None]]


class WriteBehind:
    """A bounded queue of write jobs and the tasks that run them."""

    def __init__(
        self, max_size: int, max_bytes: int = 2**62, workers: int = 4, batch: int = 64
    ) -> None:
        self._queue: asyncio.Queue[tuple[Job, int]] = asyncio.Queue(max_size)
        self._max_bytes = max_bytes
        self._bytes = 0
        self._worker_count = workers
        self._batch = batch
        self._workers: list[asyncio.Task[None]] = []

    @property
    def size_bytes(self) -> int:
        """Bytes held by jobs queued or running."""
        return self._bytes

    def submit(self, job: Job, size_bytes: int = 0) -> bool:
        """Queue ``job``, which holds ``size_bytes``; False (and nothing queued) when the queue
        is full in jobs or in bytes."""
        if self._bytes + size_bytes > self._max_bytes:
            return False
        try:
            self._queue.put_nowait((job, size_bytes))
        except asyncio.QueueFull:
            return False
        self._bytes += size_bytes
        return True

    async def start(self) -> None:
        if not self._workers:
            self._workers = [
                asyncio.create_task(self._drain(), name=f"cache-write-behind-{index}")
                for index in range(self._worker_count)
            ]

    async def join(self) -> None:
        """Wait until every queued job has run (tests and orderly shutdown use it)."""
        await self._queue.join()

    async def close(self, drain_timeout_s: float = 2.0) -> None:
        """Run what is queued (for at most ``drain_timeout_s``), then stop the workers."""
        if self._workers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._queue.join(), drain_timeout_s)
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._workers = []

    async def _drain(self) -> None:
        queue = self._queue
        while True:
            jobs = [await queue.get()]
            while len(jobs) < self._batch and not queue.empty():
                jobs.append(queue.get_nowait())
            try:
                running = [started for job, _ in jobs if (started := _start(job)) is not None]
                if len(running) == 1:
                    await _finish(running[0])
                elif running:
                    for error in await asyncio.gather(*running, return_exceptions=True):
                        if isinstance(error, Exception):
                            _report(error)
                        elif isinstance(error, BaseException):
                            raise error
            finally:
                for _, size in jobs:
                    self._bytes -= size
                    queue.task_done()


def _start(job: Job) -> Awaitable[None] | None:
    try:
        return job()
    except Exception as error:  # a job must never kill its worker
        _report(error)
        return None


async def _finish(running: Awaitable[None]) -> None:
    try:
        await running
    except Exception as error:
        _report(error)


def _report(error: Exception) -> None:
    logger.error("cache write-behind job failed", exc_info=error)
