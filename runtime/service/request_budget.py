"""What requests may hold of the process at once: a count of requests, and a budget of bytes.

A request's bytes are estimated from what it holds (see :func:`body_cost` and the gRPC
counterpart in ``grpc.servicer``): the body as received, the tensors decoded from it, and the
Python objects a JSON decode makes on the way (measured at 13-16 times the JSON text for
numbers). Over the budget a request waits briefly for others to finish, then is refused with
:class:`OverloadedError` (503 with ``Retry-After``); so many large requests at once are slowed
and refused, never an out-of-memory kill.

An HTTP request takes its bytes as its body arrives and inflates (:meth:`try_take` and
:meth:`take`, see ``http.body_charge``), and its decode once the body is whole, not its
declared length up front: a client that declares much and sends little holds only what it sent
(and a bounded step ahead), and one whose body could never fit the
whole budget is refused (413) rather than run alone. A gRPC message is whole (and inflated)
before it is counted, and counted before it is parsed; one whose cost is larger than the whole
budget is refused the same way when it enters (gRPC ``RESOURCE_EXHAUSTED``), so no request ever
holds the whole budget alone.

Used from the event loop and from the gRPC server's threads (a memoized ``ModelInfer`` hit is
admitted on the call's thread, as every inference request is admitted once at its transport's
door): the counts change under one lock, held for a few additions, and waiters wait on the
loop, woken through it (``call_soon_threadsafe``) whichever thread let room free. The fast path
is one synchronous call, :meth:`try_enter`, and the matching :meth:`leave`: no coroutine.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from cachefleet.runtime.errors import OverloadedError, PayloadTooLargeError

#: How long a request over the byte budget waits for room before its 503.
WAIT_S = 2.0
#: Peak bytes of a JSON decode per byte of JSON text (orjson, numbers: 13.7 for floats, 16 for
#: small integers).
JSON_EXPANSION = 16


def body_cost(body_bytes: int, header_length: int | None) -> int:
    """The bytes an HTTP request of ``body_bytes`` may hold while it is decoded: the body, a
    copy of its binary part as tensors, and its JSON part's decode."""
    json_bytes = body_bytes if header_length is None else min(header_length, body_bytes)
    return 2 * body_bytes - json_bytes + JSON_EXPANSION * json_bytes


class RequestBudget:
    """Requests and their bytes in flight, against ``max_requests`` and ``max_bytes``."""

    def __init__(self, max_requests: int, max_bytes: int, wait_s: float = WAIT_S) -> None:
        self._max_requests = max_requests
        self._max_bytes = max_bytes
        self._wait_s = wait_s
        self._requests = 0
        self._bytes = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: Guards the counts: the loop and the gRPC server's threads change them.
        self._lock = threading.Lock()
        #: The loop the waiters wait on (set by the first): a thread wakes them through it.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def max_bytes(self) -> int:
        """The whole budget (``--max-inflight-bytes``)."""
        return self._max_bytes

    @property
    def requests(self) -> int:
        return self._requests

    @property
    def bytes(self) -> int:
        return self._bytes

    def try_enter(self, cost: int) -> bool:
        """Count one request; True when its ``cost`` bytes fit now, False when the caller must
        :meth:`wait` for them. Raises OverloadedError when no request may enter at all, and
        PayloadTooLargeError when ``cost`` could never fit the whole budget."""
        if cost > self._max_bytes:
            raise self.over_budget(cost)
        with self._lock:
            if self._requests < self._max_requests:
                self._requests += 1
                if self._bytes + cost <= self._max_bytes:
                    self._bytes += cost
                    return True
                return False
        raise OverloadedError(
            f"the server is answering {self._requests} requests, the most it may "
            "(--max-requests-in-flight); retry later"
        )

    async def wait(self, cost: int) -> None:
        """After :meth:`try_enter` said False: take ``cost`` bytes once they fit, or leave and
        raise OverloadedError after waiting :data:`WAIT_S`."""
        try:
            await self._room_for(cost)
        except BaseException:
            with self._lock:
                self._requests -= 1
            self._wake()
            raise

    def try_take(self, cost: int) -> bool:
        """For a request that entered: take ``cost`` more bytes if they fit now."""
        with self._lock:
            if self._bytes + cost <= self._max_bytes:
                self._bytes += cost
                return True
            return False

    async def take(self, cost: int) -> None:
        """After :meth:`try_take` said False: take ``cost`` more bytes once they fit, or raise
        OverloadedError after waiting :data:`WAIT_S` (the request keeps what it took before,
        and gives it back with :meth:`leave`)."""
        await self._room_for(cost)

    async def _room_for(self, cost: int) -> None:
        """Take ``cost`` bytes once they fit; OverloadedError after :data:`WAIT_S`."""
        loop = self._loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        while not self.try_take(cost):
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise OverloadedError(
                    f"the server holds {self._bytes} bytes of requests, with room for "
                    f"{self._max_bytes} (--max-inflight-bytes); retry later"
                )
            waiter = loop.create_future()
            self._waiters.append(waiter)
            try:
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                pass
            finally:
                if not waiter.done():
                    waiter.cancel()

    def leave(self, cost: int) -> None:
        """A request that entered is done; ``cost``: the bytes it took (0 if it never did)."""
        with self._lock:
            self._requests -= 1
            self._bytes -= cost
        if self._waiters:
            self._wake_soon()

    def hold(self, cost: int) -> None:
        """Count ``cost`` bytes that exist already (a rendered answer waiting to be written),
        whether they fit or not: refusing them would not free them, but others wait for them.
        Give them back with :meth:`release`."""
        with self._lock:
            self._bytes += cost

    def release(self, cost: int) -> None:
        """Give back bytes taken with :meth:`hold`."""
        with self._lock:
            self._bytes -= cost
        if self._waiters:
            self._wake_soon()

    def over_budget(self, cost: int) -> PayloadTooLargeError:
        """The refusal of a request that would hold ``cost`` bytes, more than the whole budget."""
        return PayloadTooLargeError(
            f"the request would hold {cost} bytes while it is decoded, more than the whole "
            f"budget of {self._max_bytes} bytes of requests in flight (--max-inflight-bytes)"
        )

    def _wake_soon(self) -> None:
        """:meth:`_wake` now on the waiters' loop, or through it from another thread."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self._loop
        if running is loop or loop is None:
            self._wake()
        else:
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        """Let every waiter look again (each checks whether its own cost fits now)."""
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
