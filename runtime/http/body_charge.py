"""An HTTP request's share of the budget of bytes in flight, paid as its body arrives and
inflates.

Charging a request for its declared length before a byte of its body had arrived let one client
that declared a large body (or sent a chunked one, charged at the size limit) and then sent it
slowly hold the whole budget, so that every other HTTP and gRPC inference waited and got 503.
Here a request enters with the cost of its first :data:`STEP` bytes of body (its whole cost
when its body is smaller, so a small request is charged once, as before) and pays for each
further step as the bytes arrive; a compressed body pays for its compressed bytes as they
arrive and for its inflated bytes before each step of inflating them.

A request whose cost could never fit the whole budget (``--max-inflight-bytes``) is refused with
413: from its declared length before anything is read, or once the bytes it sent say so.
"""

from __future__ import annotations

from cachefleet.runtime.service.request_budget import RequestBudget, body_cost

#: Body bytes a request pays for ahead of their arrival (and so the most it holds of the
#: budget beyond what it sent).
STEP = 256 * 1024


class BodyCharge:
    """What one request has taken of ``budget``, grown with its body (see the module).

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
        ceiling = self._ceiling
        self._header_length = header_length
        self._compressed = compressed
        #: Body bytes (as received) paid for.
        self.covered = min(ceiling, STEP)
        #: Inflated bytes paid for.
        self._inflated = 0
        #: Bytes taken from the budget, to give back with ``budget.leave``.
        self.taken = 0

    def opening_cost(self) -> int:
        """What the request takes when it enters. PayloadTooLargeError when its declared body
        (as received: a compressed one may only grow) could never fit the whole budget."""
        opening = self._cost(self.covered, 0)
        whole = opening
        if self._declared and self._ceiling != self.covered:
            whole = self._cost(self._ceiling, 0)
        if whole > self._budget.max_bytes:
            raise self._budget.over_budget(whole)
        return opening

    async def cover(self, size: int) -> None:
        """The body has reached ``size`` bytes, more than :attr:`covered`: pay for them and the
        next step (waiting for room, then OverloadedError; PayloadTooLargeError past the
        whole budget)."""
        covered = max(size, min(self._ceiling, size + STEP))
        if self._cost(covered, self._inflated) > self._budget.max_bytes:
            covered = size  # no step ahead where the bytes themselves would still fit
        await self._reach(self._cost(covered, self._inflated))
        self.covered = covered

    async def cover_inflated(self, size: int) -> None:
        """Pay for ``size`` inflated bytes before they are made."""
        await self._reach(self._cost(self.covered, size))
        self._inflated = size

    def _cost(self, body: int, inflated: int) -> int:
        if self._compressed:
            return body + body_cost(inflated, self._header_length)
        return body_cost(body, self._header_length)

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
