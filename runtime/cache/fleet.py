"""One computation per fleet: identical misses on many replicas run the model once.

Single-flight stops at the process. When a burst of identical requests reaches many replicas at
once (a rollout's new key space, a flush), each replica's single-flight leader would compute.
Here, where that leader is about to compute (after its Redis lookup missed), it asks Redis for a
short lease on the key (``fleet_lease``): the first replica gets it and computes; it writes the
entry to Redis at once (not through the write-behind queue), then releases the lease and
publishes the key's digest. The others wait for that message (``fleet_fills``: one subscription
per process), and on each message, and now and then without one, ask again in the same round
trip as a lease request: the entry is there (answered as a Redis hit), or the lease came free
(the holder gave up or its lease ran out: this replica takes it and computes), or it is still
held (wait on). At the deadline a waiter computes itself.

Only for models the policy finds expensive enough (``fleet_policy``), only with a Redis tier,
never while the key's circuit breaker is not closed. Nothing here fails or delays a request
beyond the deadline: every Redis fault ends the turn at once with a local computation, counted
in ``cachefleet_cache_errors_total{tier="redis",kind}`` and told to the breaker, like a lookup's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Literal

from cachefleet.runtime.cache.breaker import CircuitBreaker
from cachefleet.runtime.cache.errors import CacheTierError
from cachefleet.runtime.cache.fleet_lease import FleetLeases, coalescible
from cachefleet.runtime.cache.fleet_policy import FleetPolicy
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.tier import Found
from cachefleet.runtime.metrics import RuntimeMetrics

if TYPE_CHECKING:  # redis-py is imported only by servers that use Redis (see factory.py)
    from cachefleet.runtime.cache.fleet_fills import FillListener
    from cachefleet.runtime.cache.shared_tier import SharedTier
    from cachefleet.runtime.tensor import Tensor

logger = logging.getLogger(__name__)
#: How a wait for another replica ended (the ``result`` label).
WaitResult = Literal["filled", "lead", "deadline", "error"]
#: The answer in a Redis entry, None if it is not a valid one (then deleted and counted).
Accept = Callable[[bytes], Found | None]
#: The Redis insert of an answer: the future it returns resolves once Redis has it.
Write = Callable[[], Awaitable[None]]
#: Told of a Redis fault: count it, feed the breaker.
OnFault = Callable[[CacheTierError, CircuitBreaker], None]


class FleetTurn:
    """A miss's part in the fleet: ``filled`` by another replica, the lease holder, or alone."""

    def __init__(
        self,
        key: CacheKey,
        *,
        fleet: FleetCoalescing | None = None,
        filled: Found | None = None,
        token: str | None = None,
    ) -> None:
        self.key = key
        self.filled = filled
        self._fleet = fleet
        #: The lease's token while this turn holds it; None once given back (or never held).
        self._token = token
        self._write: Write | None = None

    def hand_over(self, write: Write) -> bool:
        """Whether this turn writes the answer to Redis itself (the holder does, at once, and
        only then tells the fleet); if not, the caller writes it behind as usual."""
        if self._token is None:
            return False
        self._write = write
        return True

    def finish(self) -> None:
        """The computation is over (answered, failed or cancelled): the holder writes what it
        was handed, then gives the lease back and tells the waiters, in the background."""
        token, self._token = self._token, None
        if token is not None and self._fleet is not None:
            self._fleet.release_soon(self.key, token, self._write)
        self._write = None


class FleetCoalescing:
    """Leases, waits and releases for the misses of one process's cache."""

    def __init__(
        self,
        leases: FleetLeases,
        listener: FillListener,
        policy: FleetPolicy,
        metrics: RuntimeMetrics,
        *,
        breaker_of: Callable[[CacheKey], CircuitBreaker],
        on_fault: OnFault,
    ) -> None:
        self.leases = leases
        self.listener = listener
        self.policy = policy
        self.metrics = metrics
        self._breaker_of = breaker_of
        self._on_fault = on_fault
        self._releases: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.listener.start()

    async def close(self) -> None:
        if self._releases:
            await asyncio.wait(set(self._releases), timeout=2.0)
        for task in list(self._releases):
            task.cancel()
        await self.listener.close()

    async def turn(self, key: CacheKey, accept: Accept) -> FleetTurn:
        """This replica's turn for ``key``, whose Redis lookup just missed: returns once the
        answer came from another replica, or this replica is to compute (holding the lease or
        not) — within the policy's window, whatever Redis does."""
        window_s = self.policy.window_s(key.model, key.version) if coalescible(key.model) else None
        breaker = self._breaker_of(key)
        if window_s is None or not _closed(breaker):
            return FleetTurn(key, fleet=self)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + window_s
        token = secrets.token_hex(16)
        waited = False
        while True:
            heard = self.listener.watch(key.hexdigest)  # before asking: no message slips by
            try:
                taken = await self.leases.take(key, token, window_s)
                breaker.record_success()
                turn = self._taken(key, taken, token, accept, waited)
                if turn is not None:
                    return turn
                waited = True
                await self._heard(heard, min(deadline - loop.time(), window_s / 4))
            except CacheTierError as error:
                self._on_fault(error, breaker)
                return self._alone(key, "error" if waited else None)
            finally:
                self.listener.unwatch(key.hexdigest, heard)
            if loop.time() >= deadline:
                return self._alone(key, "deadline")
            if not _closed(breaker):
                return self._alone(key, "error")

    def _taken(
        self, key: CacheKey, taken: bytes | bool, token: str, accept: Accept, waited: bool
    ) -> FleetTurn | None:
        """The turn a lease request decides, or None to wait on (the lease is held)."""
        if taken is True:
            self.metrics.cache_fleet_leases.labels(key.model, key.version).inc()
            if waited:
                self._count(key, "lead")
            return FleetTurn(key, fleet=self, token=token)
        if taken is False:
            return None
        outputs = accept(taken)
        if outputs is None:  # not a valid entry (deleted, counted): compute
            return self._alone(key, "error" if waited else None)
        if waited:
            self._count(key, "filled")
        return FleetTurn(key, fleet=self, filled=outputs)

    @staticmethod
    async def _heard(heard: asyncio.Future[None], timeout_s: float) -> None:
        """Until the key is announced, or ``timeout_s`` (a look without a message)."""
        if timeout_s > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(heard), timeout_s)

    def _alone(self, key: CacheKey, result: WaitResult | None) -> FleetTurn:
        if result is not None:
            self._count(key, result)
        return FleetTurn(key, fleet=self)

    def _count(self, key: CacheKey, result: WaitResult) -> None:
        self.metrics.cache_fleet_waits.labels(key.model, key.version, result).inc()

    def release_soon(self, key: CacheKey, token: str, write: Write | None) -> None:
        task = asyncio.ensure_future(self._release(key, token, write))
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    async def _release(self, key: CacheKey, token: str, write: Write | None) -> None:
        """Write the entry (when there is one to write), then release and announce: a waiter
        that hears the announcement finds the entry, or computes."""
        if write is not None:
            try:
                await write()
            except Exception:  # a bug in the insert: the waiters must still hear
                logger.exception("cache: fleet write of %s failed", key.hexdigest)
        breaker = self._breaker_of(key)
        if not breaker.allow():
            return  # the lease runs out by itself; the waiters compute at their deadline
        try:
            await self.leases.release(key, token)
        except CacheTierError as error:
            self._on_fault(error, breaker)
            return
        breaker.record_success()


class SharedFleet:
    """Fleet coalescing on one shared tier, as the read-through cache meets it: a miss's turn
    (which reads a filled entry through the tier's own checks) and the holder's write (the
    tier's insert, made at once instead of behind the response)."""

    def __init__(self, coalescing: FleetCoalescing, tier: SharedTier) -> None:
        self.coalescing = coalescing
        #: The tier the fleet coalesces on (a request that skips it takes no turn).
        self.tier = tier

    @property
    def listener(self) -> FillListener:
        """The fills subscription (what tests wait on to be subscribed)."""
        return self.coalescing.listener

    async def start(self) -> None:
        await self.coalescing.start()

    async def close(self) -> None:
        await self.coalescing.close()

    async def turn(self, key: CacheKey) -> FleetTurn:
        """Where this process's one computation of ``key`` is about to start. An entry the
        lookup just refused (corrupt or forged) is being replaced by this computation: no
        lease, whose script would read the same bad entry again before its delete lands."""
        if self.tier.refused(key):
            return FleetTurn(key)
        return await self.coalescing.turn(key, functools.partial(self.tier.accept, key))

    def write(self, key: CacheKey, outputs: Sequence[Tensor], ttl_s: float) -> Write:
        """The tier's insert of ``outputs``, for a lease holder to make at once."""
        return self.tier.insert_job(key, tuple(outputs), ttl_s)


def _closed(breaker: CircuitBreaker) -> bool:
    """Whether Redis is trusted for the fleet now: not while a breaker is open or probing,
    nor right after a failure (the lookup before may just have timed out: one is enough)."""
    return breaker.healthy
