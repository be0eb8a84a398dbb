"""The terms a computation runs on, carried by the work itself: what identical requests may
differ in without a different answer, but with a different outcome.

A request's ``priority`` and ``timeout`` are not in its cache key: they never change the
tensors. They do change how its computation is queued (which requests go first, how long it
may wait, whether it is refused), so a request that shared another's computation would get the
other's place, delay or error. Hence the rule: requests share a computation (the single-flight
of a key, of a row, the fleet's lease) only with requests on the same terms, so that whoever
leads it runs it exactly as each of them would have run it alone. Merging the terms (the best
priority, the longest timeout among the waiters) would not do: a waiter's own timeout must
still end its own wait, and a place in the queue taken by whoever asked earliest at the best
level would overtake requests that came between.

Whoever makes a compute knows its terms (the model's scheduler resolves them: the priority
level and the queue timeout it would apply); the cache only compares them. They travel with
the compute as a wrapper type, as :mod:`~cachefleet.runtime.cache.completion`'s mark does: a
plain callable runs on the neutral terms (those of a request without such parameters), which
is the fallback everywhere.

An error of the terms themselves (a full queue, an expired queue timeout:
:class:`~cachefleet.runtime.errors.SchedulingTermsError`) is the leader's own even among
requests on the same terms (the leader came first, so its timeout ran out first): the others
start over on their own rather than take it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, ParamSpec, TypeVar

from cachefleet.runtime.cache.key import CacheKey

P = ParamSpec("P")
T = TypeVar("T")
#: What a single-flight shares by: the key, and the terms when they are not the neutral ones.
FlightKey = CacheKey | tuple[CacheKey, Hashable]


class OnTerms(Generic[P, T]):
    """``work`` that runs on ``terms`` (hashable; equal terms queue a computation alike)."""

    __slots__ = ("_work", "terms")

    def __init__(self, work: Callable[P, Awaitable[T]], terms: Hashable) -> None:
        self._work = work
        self.terms = terms

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[T]:
        return self._work(*args, **kwargs)


def on_terms(work: Callable[P, Awaitable[T]], terms: Hashable | None) -> Callable[P, Awaitable[T]]:
    """``work`` marked with ``terms``; unmarked when they are the neutral ones (None)."""
    return work if terms is None else OnTerms(work, terms)


def terms_of(work: object) -> Hashable | None:
    """The terms ``work`` runs on; None for the neutral ones."""
    return work.terms if isinstance(work, OnTerms) else None


def flight_key(key: CacheKey, terms: Hashable | None) -> FlightKey:
    """The single-flight key of ``key``'s computation on ``terms``."""
    return key if terms is None else (key, terms)
