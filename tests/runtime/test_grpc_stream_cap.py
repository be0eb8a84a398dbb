"""The stream cap on real grpcio servers of both kinds, with an echo stream of raw bytes: past
the cap a stream ends with ``RESOURCE_EXHAUSTED``; every place comes back however its stream
ended (half-closed by the client, cancelled, refused), so the count never leaks."""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from support.waiting import wait_for

from cachefleet.runtime.grpc.stream_cap import StreamCap

_SERVICE = "test.Echo"
_METHOD = f"/{_SERVICE}/Stream"
_CAP = 2


def _echo_threaded(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    yield from requests


async def _echo_async(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


def _same_threaded(request: bytes, context: grpc.ServicerContext) -> bytes:
    return request


async def _same_async(request: bytes, context: Any) -> bytes:
    return request


def _handlers(stream: Callable[..., Any], unary: Callable[..., Any]) -> dict[str, Any]:
    return {
        "Stream": grpc.stream_stream_rpc_method_handler(stream),
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
    }


class _Stream:
    """An echo stream: sends one message, then whatever :meth:`send` gives, until closed."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._requests: queue.Queue[bytes | None] = queue.Queue()
        self._requests.put(b"hello")
        method: Any = channel.stream_stream(_METHOD)  # raw bytes: no (de)serializers to type
        self.call: Any = method(iter(self._requests.get, None), timeout=60)

    def first(self) -> grpc.StatusCode | None:
        """None once the echo came back (the stream is open), else how the call ended."""
        try:
            assert next(self.call) == b"hello"
        except grpc.RpcError as error:
            return error.code()
        return None

    def half_close(self) -> None:
        self._requests.put(None)


def _exercise(port: int, cap: StreamCap) -> None:
    """Open the cap's worth of streams and one more, then end them in each way."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        streams = [_Stream(channel) for _ in range(_CAP)]
        assert [stream.first() for stream in streams] == [None] * _CAP
        assert cap.open == _CAP
        refused = _Stream(channel)
        assert refused.first() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = refused.call.details()
        assert f"at most {_CAP} (--grpc-max-streams)" in details
        # Unary calls are not counted, and pass while every place is taken.
        unary: Any = channel.unary_unary(f"/{_SERVICE}/Unary")
        assert unary(b"x", timeout=30) == b"x"

        streams[0].half_close()
        assert list(streams[0].call) == []  # the echo ends with the requests
        streams[1].call.cancel()
        wait_for(lambda: cap.open == 0, "every place given back")
        again = _Stream(channel)
        assert again.first() is None
        again.call.cancel()
        wait_for(lambda: cap.open == 0, "the last place given back")


def test_the_synchronous_server() -> None:
    cap = StreamCap(_CAP)
    with futures.ThreadPoolExecutor(max_workers=8) as pool:
        server = grpc.server(pool)
        handlers = cap.threaded(_handlers(_echo_threaded, _same_threaded))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            _exercise(port, cap)
        finally:
            server.stop(None).wait()


async def test_the_asyncio_server() -> None:
    cap = StreamCap(_CAP)
    server = grpc.aio.server()
    handlers = cap.asynchronous(_handlers(_echo_async, _same_async))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        await asyncio.to_thread(_exercise, port, cap)
    finally:
        await server.stop(None)


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StreamCap(0)
