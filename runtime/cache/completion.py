"""Work that cannot be interrupted once started, marked as such by its type.

Whoever makes a compute knows whether its costly part can be cut short (a model run on the
event loop cannot); whoever shares it between callers (:class:`~.singleflight.SingleFlight`)
can use the fact to save a task per miss. The fact travels with the compute itself, as a
wrapper type, so no request, flag or parameter on the ordinary path has to carry it: a plain
callable is ordinary work, and that is the fallback everywhere.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class RunsToCompletion(Generic[T]):
    """``work`` (called with no arguments), which runs to completion once its costly part
    starts: only an earlier await can be interrupted."""

    __slots__ = ("_work",)

    def __init__(self, work: Callable[[], Awaitable[T]]) -> None:
        self._work = work

    def __call__(self) -> Awaitable[T]:
        return self._work()


def passed_on(
    compute: Callable[[], Awaitable[object]], work: Callable[[], Awaitable[T]]
) -> Callable[[], Awaitable[T]]:
    """``work``, whose last await is ``compute``, marked as ``compute`` is: once ``compute``
    starts, ``work`` can be interrupted no more than ``compute`` itself. The one place a
    wrapper around a compute keeps its mark."""
    return RunsToCompletion(work) if isinstance(compute, RunsToCompletion) else work
