"""Notices a client that hangs up while its request waits for the model, and cancels the request.

Starlette does not cancel a handler when its client goes. Watching every request would cost a
task on every cache hit, so the watch starts only when the request waits for a model execution
(the service calls :meth:`ClientWatch.start`); the cancellation then drops the request from the
batch queue, while a batch already running goes on for the other requests in it.
"""

from __future__ import annotations

import asyncio

from starlette.requests import Request


class ClientWatch:
    """Cancels ``task`` (the request's handler) if the client disconnects after ``start``."""

    def __init__(self, request: Request, task: asyncio.Task[object] | None) -> None:
        self._request = request
        self._task = task
        self._watcher: asyncio.Task[None] | None = None
        #: Whether the client went and the request was cancelled because of it.
        self.fired = False

    def start(self) -> None:
        if self._watcher is None and self._task is not None:
            self._watcher = asyncio.ensure_future(self._watch())

    def absorb(self) -> bool:
        """After the cancellation this watch caused: undo it (so that the handler can finish
        quietly instead of the server logging an error per hang-up); False if it was not ours."""
        if not self.fired or self._task is None:
            return False
        self._task.uncancel()
        return True

    def stop(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None

    async def _watch(self) -> None:
        # The body has been read: the next ASGI message is the disconnect, whenever it comes.
        while True:
            message = await self._request.receive()
            if message["type"] == "http.disconnect":
                if self._task is not None and not self._task.done():
                    self.fired = True
                    self._task.cancel()
                return
