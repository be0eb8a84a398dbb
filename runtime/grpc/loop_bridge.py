"""Runs the asyncio servicer's methods for calls that arrive on grpcio's synchronous server.

The threaded server answers memoized ``ModelInfer`` hits on its own threads; every other call
(misses, the other methods, streams) is the servicer's, which lives on the event loop with the
service it calls. A :class:`LoopContext` stands in for the asyncio servicer context there
(metadata in; trailing metadata, abort out), and the thread that holds the call waits for the
coroutine and passes what it set on to grpcio's context. A call the client cancels (or whose
deadline passes) cancels its coroutine. A stream's requests are waited for on the threads of
``readers``, an executor of the stream's own (one thread per stream the cap admits), never the
loop's default executor: an idle stream waits there for as long as its client likes, and the
default executor is shared with everything else that runs off the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import CancelledError, Executor
from typing import Any

import grpc

#: A servicer method: (request, context) -> response.
Unary = Callable[[Any, Any], Awaitable[Any]]
Streaming = Callable[[AsyncIterator[Any], Any], AsyncIterator[Any]]
_END = object()


class LoopContext:
    """The part of ``grpc.aio.ServicerContext`` the servicer uses, recorded for the thread."""

    def __init__(self, metadata: Any) -> None:
        self._metadata = metadata
        self.trailing: Any = None
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def invocation_metadata(self) -> Any:
        return self._metadata

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing = metadata

    async def abort(self, code: grpc.StatusCode, details: str = "", *_: Any) -> None:
        self.code, self.details = code, details
        raise grpc.aio.AbortError()

    def finish(self, context: grpc.ServicerContext) -> None:
        """Pass the trailing metadata and an abort on to grpcio's ``context``."""
        if self.trailing is not None:
            context.set_trailing_metadata(self.trailing)
        if self.code is not None:
            context.abort(self.code, self.details)


class LoopBridge:
    """Calls servicer methods on ``loop`` from the server's threads; streams' requests are
    read on ``readers``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, readers: Executor) -> None:
        self.loop = loop
        self._readers = readers

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

    def unary(self, method: Unary) -> Callable[[Any, grpc.ServicerContext], Any]:
        """A synchronous handler behaviour for the servicer's unary ``method``."""

        def call(request: Any, context: grpc.ServicerContext) -> Any:
            stand_in = LoopContext(context.invocation_metadata())
            response = None
            with contextlib.suppress(grpc.aio.AbortError):
                response = self.wait(method(request, stand_in), context)
            stand_in.finish(context)
            return response

        return call

    def streaming(self, method: Streaming) -> Callable[[Iterator[Any], grpc.ServicerContext], Any]:
        """A synchronous handler behaviour for the servicer's streaming ``method``: requests
        are read on ``readers``, responses come back one by one."""

        def call(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            stand_in = LoopContext(context.invocation_metadata())
            responses = method(self._read(requests), stand_in)
            try:
                while True:
                    response = self.wait(_next(responses), context)
                    if response is _END:
                        break
                    yield response
            except grpc.aio.AbortError:
                pass
            finally:  # a generator left early (the call ended) must not wait for the collector
                asyncio.run_coroutine_threadsafe(_close(responses), self.loop)
            stand_in.finish(context)

        return call

    async def _read(self, requests: Iterator[Any]) -> AsyncIterator[Any]:
        loop = asyncio.get_running_loop()
        while True:
            request = await loop.run_in_executor(self._readers, next, requests, _END)
            if request is _END:
                return
            yield request


async def _awaited(work: Awaitable[Any]) -> Any:
    return await work


async def _next(responses: AsyncIterator[Any]) -> Any:
    return await anext(responses, _END)


async def _close(responses: Any) -> None:
    aclose = getattr(responses, "aclose", None)
    if aclose is not None:
        await aclose()
