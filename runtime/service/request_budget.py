"""What requests may hold of the process at once: a count of requests, and a budget of bytes.

A request's bytes are estimated from what it holds (see :func:`body_cost` and the gRPC
counterpart in ``grpc.decode``): the body as received, the tensors decoded from it, and the
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

Used from the event loop and, for one thing, from the gRPC server's threads: a memoized
``ModelInfer`` hit is admitted on the call's thread (:meth:`enter_from_thread` and
:meth:`leave_from_thread`), as every inference request is admitted at its transport's door; a
place never crosses threads, so a call the thread does not answer is admitted again on the loop.
The loop's side takes no lock, so that a small HTTP hit pays a few additions for its admission:
the loop alone writes its counts, the threads write theirs under a lock of their own, and each
side checks the sum only after adding its own share (a thread's and the loop's admissions that
meet both see the other, so the sum never goes over the limits; at worst both are refused at the
very edge). The fast path is one synchronous call, :meth:`try_enter`, and the matching
:meth:`leave`: no coroutine, no lock. Waiters wait on the loop; a thread that frees room wakes
them through it (``call_soon_threadsafe``).
"""

from __future__ import annotations

import asyncio
import contextlib
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
        #: The loop's share, written by the loop only.
        self._requests = 0
        self._bytes = 0
        #: The gRPC server threads' share, written under ``_thread_lock`` only.
        self._thread_requests = 0
        self._thread_bytes = 0
        self._thread_lock = threading.Lock()
        self._waiters: deque[asyncio.Future[None]] = deque()
        #: The loop the waiters wait on (set by the first): a thread wakes them through it.
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def max_bytes(self) -> int:
        """The whole budget (``--max-inflight-bytes``)."""
        return self._max_bytes

    @property
    def requests(self) -> int:
        return self._requests + self._thread_requests

    @property
    def bytes(self) -> int:
        return self._bytes + self._thread_bytes

    def try_enter(self, cost: int) -> bool:
        """On the loop: count one request; True when its ``cost`` bytes fit now, False when
        the caller must :meth:`wait` for them. Raises OverloadedError when no request may enter
        at all, and PayloadTooLargeError when ``cost`` could never fit the whole budget."""
        if cost > self._max_bytes:
            raise self.over_budget(cost)
        self._requests += 1  # added before the sum is read (see the module)
        if self._requests + self._thread_requests > self._max_requests:
            self._requests -= 1
            raise self._overloaded()
        self._bytes += cost  # as try_take, written out: every request pays this call
        if self._bytes + self._thread_bytes <= self._max_bytes:
            return True
        self._bytes -= cost
        return False

    async def wait(self, cost: int) -> None:
        """After :meth:`try_enter` said False: take ``cost`` bytes once they fit, or leave and
        raise OverloadedError after waiting :data:`WAIT_S`."""
        try:
            await self._room_for(cost)
        except BaseException:
            self._requests -= 1
            self._wake()
            raise

    def try_take(self, cost: int) -> bool:
        """On the loop, for a request that entered: take ``cost`` more bytes if they fit now."""
        self._bytes += cost  # added before the sum is read (see the module)
        if self._bytes + self._thread_bytes <= self._max_bytes:
            return True
        self._bytes -= cost
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
                    f"the server holds {self.bytes} bytes of requests, with room for "
                    f"{self._max_bytes} (--max-inflight-bytes); retry later"
                )
            waiter = loop.create_future()
            self._waiters.append(waiter)
            # Looked at again once waiting is written down: a thread that freed room meanwhile
            # saw no waiter to wake.
            if self.try_take(cost):
                waiter.cancel()
                return
            try:
                await asyncio.wait_for(asyncio.shield(waiter), remaining)
            except TimeoutError:
                pass
            finally:
                if not waiter.done():
                    waiter.cancel()

    def leave(self, cost: int) -> None:
        """On the loop: a request that entered is done; ``cost``: the bytes it took (0 if it
        never did)."""
        self._requests -= 1
        self._bytes -= cost
        if self._waiters:
            self._wake()

    def enter_from_thread(self, cost: int) -> bool:
        """On a gRPC server thread: count one request with its ``cost`` bytes if both fit now
        (True; give them back with :meth:`leave_from_thread`). False, nothing counted, when the
        bytes do not fit: the request goes to the loop, which waits for room. Raises as
        :meth:`try_enter` does when no request may enter, or ``cost`` never could."""
        if cost > self._max_bytes:
            raise self.over_budget(cost)
        with self._thread_lock:
            self._thread_requests += 1
            self._thread_bytes += cost
            if self._requests + self._thread_requests > self._max_requests:
                self._thread_requests -= 1
                self._thread_bytes -= cost
                raise self._overloaded()
            if self._bytes + self._thread_bytes > self._max_bytes:
                self._thread_requests -= 1
                self._thread_bytes -= cost
                return False
        return True

    def leave_from_thread(self, cost: int) -> None:
        """On a gRPC server thread: a request :meth:`enter_from_thread` counted is done."""
        with self._thread_lock:
            self._thread_requests -= 1
            self._thread_bytes -= cost
        loop = self._loop
        if self._waiters and loop is not None:  # read after the counts (see _room_for)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
                loop.call_soon_threadsafe(self._wake)

    def hold(self, cost: int) -> None:
        """On the loop: count ``cost`` bytes that exist already (a rendered answer waiting to
        be written), whether they fit or not: refusing them would not free them, but others
        wait for them. Give them back with :meth:`release`."""
        self._bytes += cost

    def release(self, cost: int) -> None:
        """Give back bytes taken with :meth:`hold`."""
        self._bytes -= cost
        if self._waiters:
            self._wake()

    def over_budget(self, cost: int) -> PayloadTooLargeError:
        """The refusal of a request that would hold ``cost`` bytes, more than the whole budget."""
        return PayloadTooLargeError(
            f"the request would hold {cost} bytes while it is decoded, more than the whole "
            f"budget of {self._max_bytes} bytes of requests in flight (--max-inflight-bytes)"
        )

    def _overloaded(self) -> OverloadedError:
        return OverloadedError(
            f"the server is answering {self.requests} requests, the most it may "
            "(--max-requests-in-flight); retry later"
        )

    def _wake(self) -> None:
        """Let every waiter look again (each checks whether its own cost fits now)."""
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
