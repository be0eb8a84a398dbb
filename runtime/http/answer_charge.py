"""A rendered answer's share of the budget of bytes in flight, held until it is written.

uvicorn's ``send`` returns once an answer is handed to the transport, and what the client has
not read stays in the transport's buffer: giving the request's share back then let clients that
never read hold answers outside every bound (24 connections sending 3 MiB to ``simple_identity``
and reading nothing took the process from 253 to 689 MiB under a 64 MiB budget). Here the
answer's bytes are counted from the moment it is rendered until the connection guard says the
write buffer is empty, or the connection gone (``written``); the guard's write deadline
(``--response-write-timeout``) bounds the wait. The request's place among those in flight is
given back when its answer is handed over, as before.
"""

from __future__ import annotations

from starlette.types import Scope

from cachefleet.runtime.http.written import written_waiter
from cachefleet.runtime.service.request_budget import RequestBudget


class AnswerCharge:
    """The bytes of one request's rendered answer, held against ``budget``."""

    __slots__ = ("_budget", "held")

    def __init__(self, budget: RequestBudget) -> None:
        self._budget = budget
        #: Answer bytes held.
        self.held = 0

    def hold(self, body: bytes) -> None:
        """``body`` is about to be sent: count it (see ``RequestBudget.hold``)."""
        size = len(body)
        self._budget.hold(size)
        self.held += size

    def release(self) -> None:
        """Give the held bytes back (the answer is written, or will never be)."""
        if self.held:
            self._budget.release(self.held)
            self.held = 0

    async def release_when_written(self, scope: Scope) -> None:
        """Wait until the answer is written or its connection gone, then give its bytes back."""
        if not self.held:
            return
        try:
            waiter = written_waiter(scope)
            if waiter is not None:
                await waiter
        finally:
            self.release()
