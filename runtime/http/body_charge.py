"""An HTTP request's share of the budget of bytes in flight, paid for what it holds: the bytes
it has received (and a bounded step ahead of them) while its body arrives, its inflated bytes
while a compressed body inflates, and its decode once the body is whole.

Charging a request for its declared length before a byte of its body had arrived let one client
that declared a large body (or sent a chunked one, charged at the size limit) and then sent it
slowly hold the whole budget, so that every other HTTP and gRPC inference waited and got 503.
Charging the bytes still to come at the JSON decode's factor did the same more slowly: each
slow JSON connection held seventeen times its step, and 240 of them that had sent about 112
bytes each filled a 1 GiB budget. Here a request holds, while its body arrives, the bytes it
sent plus at most :data:`STEP` bytes ahead (its whole body when that is smaller, so a small
request is charged once on entry); a compressed body holds its compressed bytes and pays for
each step of inflated bytes before it is made; and the decode (``body_cost``: the tensors and
the JSON objects, up to 16 times the JSON text) is paid for once the body's real size is
known, by :meth:`BodyCharge.decoding`, before the decode starts, so the charge bounds the
request's peak without ever being paid for bytes that never came.

A request whose decode could never fit the whole budget (``--max-inflight-bytes``) is refused
with 413: from its declared length before anything is read, or once the bytes it sent or
inflated say so.
"""

from __future__ import annotations

from cachefleet.runtime.service.request_budget import RequestBudget, body_cost

#: Body bytes a request pays for ahead of their arrival (and so the most it holds of the
#: budget beyond what it sent).
STEP = 256 * 1024


class BodyCharge:
    """What one request has taken of ``budget``, grown with what it holds (see the module).

    ``declared``: the body's declared length (None: chunked), ``limit``: the size limit;
    ``header_length``: the binary extension's JSON header length; ``compressed``: whether its
    body is inflated before it is decoded."""

    def __init__(
        self,
        budget: RequestBudget,
        declared: int | None,
        limit: int,
        header_length: int | None,
        *,
        compressed: bool,
    ) -> None:
        self._budget = budget
        self._declared = declared is not None
        #: The most body bytes the request may bring.
        self._ceiling = limit if declared is None else min(declared, limit)
        self._header_length = header_length
        self._compressed = compressed
        #: Body bytes (as received) paid for.
        self.covered = min(self._ceiling, STEP)
        #: Inflated bytes paid for.
        self._inflated = 0
        #: Bytes taken from the budget, to give back with ``budget.leave``.
        self.taken = 0

    def opening_cost(self) -> int:
        """What the request takes when it enters: its first step of body bytes.
        PayloadTooLargeError when its declared body could never be decoded within the whole
        budget (as received: a compressed one may only grow)."""
        if self._declared:
            self._check_received(self._ceiling)
        return self.covered

    async def cover(self, size: int) -> None:
        """The body has reached ``size`` bytes, more than :attr:`covered`: pay for them and up
        to a step more (waiting for room, then OverloadedError; PayloadTooLargeError once the
        bytes received could never be decoded within the whole budget)."""
        self._check_received(size)
        covered = min(self._ceiling, size + STEP)
        if covered + self._inflated > self._budget.max_bytes:
            covered = size  # no step ahead where the bytes themselves would still fit
        await self._reach(covered + self._inflated)
        self.covered = covered

    async def cover_inflated(self, size: int) -> None:
        """Pay for ``size`` inflated bytes before they are made (PayloadTooLargeError once
        they could never be decoded within the whole budget)."""
        self._check(self.covered + body_cost(size, self._header_length))
        await self._reach(self.covered + size)
        self._inflated = size

    async def decoding(self, size: int) -> None:
        """The body is whole, ``size`` bytes as it is decoded (inflated, when compressed):
        pay for its decode (``body_cost``) before it starts; OverloadedError when there is no
        room for it in time."""
        held = self.covered if self._compressed else 0
        await self._reach(held + body_cost(size, self._header_length))

    def _check_received(self, size: int) -> None:
        """PayloadTooLargeError when ``size`` body bytes as received could never be decoded
        within the whole budget (a compressed body is held as it came: it may only grow)."""
        self._check(size if self._compressed else body_cost(size, self._header_length))

    def _check(self, cost: int) -> None:
        if cost > self._budget.max_bytes:
            raise self._budget.over_budget(cost)

    async def _reach(self, cost: int) -> None:
        extra = cost - self.taken
        if extra <= 0:
            return
        budget = self._budget
        if cost > budget.max_bytes:
            raise budget.over_budget(cost)
        if not budget.try_take(extra):
            await budget.take(extra)
        self.taken = cost
