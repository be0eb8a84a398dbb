"""Single-flight: concurrent calls for the same key share one execution.

The shared work runs in its own task, so a caller that goes away (a client disconnect cancels
its request) cancels neither the work nor the other callers' wait. Only when every caller has
gone is the work cancelled too: nobody waits for it, and a model execution it queued for can
then be dropped before it runs. Everyone gets the same result, or the same exception (but
see below).

A task per miss costs the event loop more than a quick model takes to run, and is only needed
when the work can be interrupted midway. Work whose costly part cannot be cancelled once
started (a model run on the event loop) says so by its type,
:class:`~cachefleet.runtime.cache.completion.RunsToCompletion`: it runs in the caller's own task
instead, still registered so that identical calls join it. If such a caller is cancelled at an
earlier await, the callers that joined it simply start the work again themselves.

An error of the leader's own scheduling terms
(:class:`~cachefleet.runtime.errors.SchedulingTermsError`: its queue timeout ran out, its
level's queue was full) is the leader's alone, never handed to those who joined it: they start
over as they do when the leader gives up. Every other error is about the request itself (the
key holds its content) and is shared (see ``terms``).

Work shared by many keys (the rows of a batch, computed in one call) is led from outside
``do``: :meth:`SingleFlight.claim` registers the caller as the leader of each key nobody is
computing, :meth:`SingleFlight.settle` answers a key's followers, :meth:`SingleFlight.abandon`
sends them off to start over; :meth:`SingleFlight.current` and :meth:`SingleFlight.follow` let
such a caller wait for the keys someone else is computing, as ``do``'s callers wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.errors import SchedulingTermsError

T = TypeVar("T")


class SingleFlight(Generic[T]):
    """One in-flight call per key, in one event loop."""

    def __init__(self) -> None:
        #: A task of its own, or the future an inline leader resolves.
        self._calls: dict[Hashable, asyncio.Future[T]] = {}
        self._waiting: dict[asyncio.Future[T], int] = {}

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, key: Hashable) -> bool:
        """Whether a call for ``key`` is in flight: a ``do`` now would join it."""
        return key in self._calls

    async def do(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        flight = self._calls.get(key)
        if flight is None and isinstance(work, RunsToCompletion):
            return await self._lead(key, work)
        if flight is None:
            task = asyncio.ensure_future(work())
            self._calls[key] = task
            task.add_done_callback(lambda done: self._finished(key, done))
            return await self._wait(task)
        if not isinstance(flight, asyncio.Task):
            return await self._join(key, flight, work)
        try:
            return await self._wait(flight)
        except SchedulingTermsError:
            pass  # the leader's own: start over
        return await self.do(key, work)

    async def _wait(self, task: asyncio.Future[T]) -> T:
        """Wait for a task of its own; the last caller to leave cancels it."""
        self._waiting[task] = self._waiting.get(task, 0) + 1
        try:
            return await asyncio.shield(task)
        finally:
            left = self._waiting.get(task, 1) - 1
            if left > 0:
                self._waiting[task] = left
            else:
                self._waiting.pop(task, None)
                if not task.done():
                    task.cancel()  # every caller has gone

    def current(self, key: Hashable) -> asyncio.Future[T] | None:
        """The call in flight for ``key`` (to :meth:`follow`), or None."""
        return self._calls.get(key)

    def claim(self, key: Hashable) -> asyncio.Future[T]:
        """Lead ``key``'s call from outside ``do`` (nothing may be in flight for it): calls
        for ``key`` join the returned future until :meth:`settle` or :meth:`abandon`."""
        flight: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._calls[key] = flight
        return flight

    def settle(self, key: Hashable, flight: asyncio.Future[T], result: T) -> None:
        """A claimed call's result, for everyone who joined it."""
        self._release(key, flight)
        flight.set_result(result)

    def abandon(self, key: Hashable, flight: asyncio.Future[T]) -> None:
        """A claimed call given up: whoever joined it starts over on their own."""
        self._release(key, flight)
        flight.cancel()

    async def follow(self, flight: asyncio.Future[T]) -> T | None:
        """Wait for ``flight`` (from :meth:`current`) as ``do``'s callers wait: its result,
        or its exception; None if its leader gave up or failed on its own terms (then start
        over)."""
        try:
            if isinstance(flight, asyncio.Task):
                return await self._wait(flight)
            return await asyncio.shield(flight)
        except asyncio.CancelledError:
            if not _gave_up(flight):
                raise  # this caller was cancelled, not the leader
        except SchedulingTermsError:
            pass  # the leader's own
        return None

    async def _lead(self, key: Hashable, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` in this task; callers that join meanwhile wait on ``flight``."""
        flight = self.claim(key)
        try:
            result = await work()
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError):
                self.abandon(key, flight)  # the joiners start over on their own
            else:
                self._release(key, flight)
                flight.set_exception(error)
                flight.exception()  # retrieved: nobody may have joined
            raise
        self.settle(key, flight, result)
        return result

    async def _join(
        self, key: Hashable, flight: asyncio.Future[T], work: Callable[[], Awaitable[T]]
    ) -> T:
        try:
            return await asyncio.shield(flight)
        except asyncio.CancelledError:
            if not _gave_up(flight):
                raise  # this caller was cancelled, not the leader
        except SchedulingTermsError:
            pass  # the leader's own
        return await self.do(key, work)

    def _release(self, key: Hashable, flight: asyncio.Future[T]) -> None:
        if self._calls.get(key) is flight:
            del self._calls[key]

    def _finished(self, key: Hashable, task: asyncio.Future[T]) -> None:
        if self._calls.get(key) is task:
            del self._calls[key]
        if not task.cancelled():
            task.exception()  # retrieved here, so an unawaited failure is not logged as lost


def _gave_up(flight: asyncio.Future[Any]) -> bool:
    """Whether a wait on ``flight`` ended because its leader gave up, not its caller."""
    task = asyncio.current_task()
    return flight.cancelled() and not (task is not None and task.cancelling())
