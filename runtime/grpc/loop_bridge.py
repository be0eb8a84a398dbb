"""Runs the service's coroutines on the event loop for calls held by the gRPC server's threads.

The server is grpcio's synchronous one: a call holds one of its threads while it is answered.
The service (models, cache, Redis, single-flight) lives on the event loop, so a call that needs
it (every method but a memoized ``ModelInfer`` hit) hands a coroutine to the loop and its thread
waits for the result. The coroutine runs in a copy of the thread's context (what the tracing
wrapper set there, the current span, is seen on the loop too). A call the client cancels (or
whose deadline passes) cancels its coroutine.

A :class:`LoopContext` stands in for grpcio's servicer context on the loop (metadata in;
trailing metadata and an abort out), and the thread passes what was set on to grpcio's context.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import CancelledError
from typing import Any

import grpc

#: A method run on the loop: (request, stand-in context) -> response.
Unary = Callable[[Any, "LoopContext"], Awaitable[Any]]


class Aborted(Exception):
    """Raised by :meth:`LoopContext.abort` to end the coroutine; the thread ends the call."""


class LoopContext:
    """What the loop's methods use of a servicer context, recorded for the call's thread."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata
        self.trailing: Any = None
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self) -> Any:
        return self._metadata

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str = "") -> None:
        self.code, self.details = code, details
        raise Aborted()

    def finish(self, context: grpc.ServicerContext) -> None:
        """Pass the trailing metadata and an abort on to grpcio's ``context``."""
        if self.trailing is not None:
            context.set_trailing_metadata(self.trailing)
        if self.code is not None:
            context.abort(self.code, self.details)


class LoopBridge:
    """Runs coroutines on ``loop`` for the server's threads."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def wait(self, work: Awaitable[Any], context: grpc.ServicerContext) -> Any:
        """``work``'s result, run on the loop; cancelled with the call."""
        future = asyncio.run_coroutine_threadsafe(_awaited(work), self.loop)

        def cancel() -> None:
            future.cancel()

        context.add_callback(cancel)
        try:
            return future.result()
        except CancelledError:
            context.abort(grpc.StatusCode.CANCELLED, "cancelled")

    def call(self, method: Unary, request: Any, context: grpc.ServicerContext) -> Any:
        """Answer a unary call with ``method`` run on the loop."""
        stand_in = LoopContext(context.invocation_metadata())
        response = None
        with contextlib.suppress(Aborted):
            response = self.wait(method(request, stand_in), context)
        stand_in.finish(context)
        return response

    def unary(self, method: Unary) -> Callable[[Any, grpc.ServicerContext], Any]:
        """A handler behaviour for the call's thread that answers with ``method`` on the loop."""

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            return self.call(method, request, context)

        return call


async def _awaited(work: Awaitable[Any]) -> Any:
    return await work
