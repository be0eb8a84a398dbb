"""``--grpc-max-streams``: how many ``ModelStreamInfer`` calls may be open at once.

A stream lives for as long as its client keeps it open, idle if it likes. On the threaded server
it holds a thread all that time (grpcio's synchronous API has no other way to serve one) and a
second one that waits for its next request, so uncounted streams could take every thread that
unary calls and model control need. Streams are therefore counted: past the cap a new one ends at
once with ``RESOURCE_EXHAUSTED`` (the code grpcio's own concurrency limit answers with), before
it reads a request, and its place is given back however it ends (finished, cancelled by the
client, past its deadline, the server stopping). Where the server is built, its threads are
sized from the cap (``threaded_server``), so unary calls keep theirs whatever streams are open.

The cap wraps the stream-stream method handlers of either server, the synchronous behaviours of
the threaded one and the asynchronous ones of grpcio's asyncio server; unary handlers are left
as they are and pay nothing for it.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import grpc

from cachefleet.runtime.grpc.restricted import Handler

#: A stream-stream behaviour of the synchronous server, and of the asyncio one.
Threaded = Callable[[Iterator[Any], grpc.ServicerContext], Iterator[Any]]
Asynchronous = Callable[[AsyncIterator[Any], Any], AsyncIterator[Any]]


class StreamCap:
    """At most ``limit`` streams open at once (see the module); thread-safe."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("the stream cap must be at least 1")
        self.limit = limit
        self._open = 0
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        """Streams open now."""
        return self._open

    @property
    def refusal(self) -> str:
        return (
            f"too many gRPC streams open: at most {self.limit} (--grpc-max-streams); "
            "close one or retry later"
        )

    def try_enter(self) -> bool:
        """Take a place, or False when all are taken."""
        with self._lock:
            if self._open >= self.limit:
                return False
            self._open += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._open -= 1

    def threaded(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """``handlers`` (of the synchronous server) with every stream-stream one counted."""
        return _each_stream(handlers, self._threaded)

    def asynchronous(self, handlers: dict[str, Handler]) -> dict[str, Handler]:
        """``handlers`` (of grpcio's asyncio server) with every stream-stream one counted."""
        return _each_stream(handlers, self._asynchronous)

    def _threaded(self, behaviour: Threaded) -> Threaded:
        def capped(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            if not self.try_enter():
                context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.refusal)
            try:
                yield from behaviour(requests, context)
            finally:
                self.leave()

        return capped

    def _asynchronous(self, behaviour: Asynchronous) -> Asynchronous:
        async def capped(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            if not self.try_enter():
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, self.refusal)
            try:
                async for response in behaviour(requests, context):
                    yield response
            finally:
                self.leave()

        return capped


def _each_stream(handlers: dict[str, Handler], wrap: Callable[[Any], Any]) -> dict[str, Handler]:
    counted = dict(handlers)
    for name, handler in handlers.items():
        if handler.request_streaming and handler.response_streaming:
            counted[name] = grpc.stream_stream_rpc_method_handler(
                wrap(handler.stream_stream),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    return counted
