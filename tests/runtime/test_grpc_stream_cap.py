"""The stream cap on a real grpcio server built as ours is, with an echo stream of raw bytes: past
the cap a stream ends with ``RESOURCE_EXHAUSTED``; every place comes back however its stream
ended (half-closed by the client, cancelled, refused), so the count never leaks. The streams run
on a pool of their own (``grpcio_seam``): with a single unary thread, a unary call still answers
while every stream is open, which fails the day grpcio stops honouring the seam."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from support.waiting import wait_for

from cachefleet.runtime.grpc.grpcio_seam import on_own_threads
from cachefleet.runtime.grpc.stream_cap import StreamCap

_SERVICE = "test.Echo"
_METHOD = f"/{_SERVICE}/Stream"
_CAP = 2


#: Names of the threads the echo streams ran on.
_STREAM_THREADS: set[str] = set()


def _echo(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
    _STREAM_THREADS.add(threading.current_thread().name)
    yield from requests


def _same(request: bytes, context: grpc.ServicerContext) -> bytes:
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


def test_streams_are_capped_on_their_own_threads() -> None:
    cap = StreamCap(_CAP)
    _STREAM_THREADS.clear()
    with (
        futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="unary") as unary,
        futures.ThreadPoolExecutor(max_workers=_CAP + 1, thread_name_prefix="streams") as streams,
    ):
        server = grpc.server(unary)
        handlers = cap.capped(_handlers(_echo, _same))
        on_own_threads([handlers["Stream"]], streams)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            _exercise(port, cap)
        finally:
            server.stop(None).wait()
    assert _STREAM_THREADS
    assert all(name.startswith("streams") for name in _STREAM_THREADS), _STREAM_THREADS


def test_a_cap_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        StreamCap(0)
