"""Idle ``ModelStreamInfer`` streams on a real server, opened by real grpcio clients: they never
take the capacity of unary calls or of model control. Past ``--grpc-max-streams`` a new stream
ends with ``RESOURCE_EXHAUSTED``; closing a stream frees its place. Checked with the local cache,
and on a server that traces (the same server, its inference methods wrapped)."""

from __future__ import annotations

import queue
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from support import loopback
from support.otlp_receiver import otlp_receiver
from support.processes import ServerProcess
from support.sample_requests import simple_grpc_request
from support.waiting import wait_for
from tritonclient.grpc import service_pb2, service_pb2_grpc

from cachefleet.runtime.grpc.server import THREADS

#: Seconds within which a call that must answer has answered (a bounded wait, not a timing).
ANSWERS_WITHIN_S = 20
DEFAULT_CAP = 16
#: More streams than the server has threads for unary calls, and than the default cap.
MANY = max(THREADS, DEFAULT_CAP) + 8


class Stream:
    """One ``ModelStreamInfer`` call: sends one ``simple`` request, reads its answer (or the
    call's end), then stays open and idle, sending nothing, until :meth:`close`."""

    def __init__(self, stub: Any, reader: futures.Executor) -> None:
        self._requests: queue.Queue[Any] = queue.Queue()
        self._requests.put(simple_grpc_request())
        self.call = stub.ModelStreamInfer(iter(self._requests.get, None))
        self._first = reader.submit(next, self.call)

    def outcome(self) -> grpc.StatusCode | None:
        """None once the first answer arrived (the stream is open), else how the call ended."""
        try:
            response = self._first.result(ANSWERS_WITHIN_S)
        except grpc.RpcError as error:
            return error.code()
        assert not response.error_message, response.error_message
        return None

    def close(self) -> None:
        self.call.cancel()


@pytest.fixture
def open_streams() -> Iterator[Callable[[Any, int], list[Stream]]]:
    """Open streams on a stub, one after the other (each answered or refused before the
    next); every one is cancelled at teardown."""
    opened: list[Stream] = []
    with futures.ThreadPoolExecutor(max_workers=4) as reader:

        def open_(stub: Any, count: int) -> list[Stream]:
            streams = []
            for _ in range(count):
                stream = Stream(stub, reader)
                opened.append(stream)
                stream.outcome()
                streams.append(stream)
            return streams

        yield open_
        for stream in opened:
            stream.close()


def _outcomes(streams: list[Stream]) -> list[grpc.StatusCode | None]:
    return [stream.outcome() for stream in streams]


def _unary_calls_answer(stub: Any) -> None:
    """``ServerLive`` and a ``ModelInfer`` answer within a bounded wait."""
    live = stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=ANSWERS_WITHIN_S)
    assert live.live
    answer = stub.ModelInfer(simple_grpc_request(), timeout=ANSWERS_WITHIN_S)
    assert [output.name for output in answer.outputs] == ["OUTPUT0", "OUTPUT1"]


def _http_load_answers(server: ServerProcess) -> None:
    url = f"{server.base_url}/v2/repository/models/simple_int8/load"
    response = loopback.post(url, timeout=ANSWERS_WITHIN_S)
    assert response.status_code == 200, response.text


def _admits_a_new_stream(stub: Any, open_: Callable[[Any, int], list[Stream]]) -> bool:
    return open_(stub, 1)[0].outcome() is None


def test_idle_streams_past_the_cap_are_refused_and_unary_calls_answer(
    make_server: Callable[..., ServerProcess],
    open_streams: Callable[[Any, int], list[Stream]],
) -> None:
    """The default cap: before it, streams past the server's thread count held every thread,
    and ``ServerLive`` waited behind them."""
    server = make_server("--model-control-mode", "explicit", "--load-model", "simple")
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        outcomes = _outcomes(open_streams(stub, MANY))
        assert outcomes == [None] * DEFAULT_CAP + [grpc.StatusCode.RESOURCE_EXHAUSTED] * (
            MANY - DEFAULT_CAP
        )
        _unary_calls_answer(stub)
        _http_load_answers(server)


def test_streams_beyond_the_thread_count_have_their_own_threads(
    make_server: Callable[..., ServerProcess],
    open_streams: Callable[[Any, int], list[Stream]],
) -> None:
    """With a cap above the server's thread count for unary calls, every stream up to it is open
    and idle at once, unary calls and an HTTP model load still answer, one more is refused, and a
    closed stream's place goes to the next."""
    server = make_server(
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--grpc-max-streams", str(MANY),
    )  # fmt: skip
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        streams = open_streams(stub, MANY)
        assert _outcomes(streams) == [None] * MANY
        _unary_calls_answer(stub)
        _http_load_answers(server)
        assert _outcomes(open_streams(stub, 1)) == [grpc.StatusCode.RESOURCE_EXHAUSTED]

        for stream in streams[:2]:
            stream.close()
        # Each place comes free once the server has seen its stream close, which a loaded
        # machine may take a moment to do for the second too.
        wait_for(lambda: _admits_a_new_stream(stub, open_streams), "a closed stream's place")
        wait_for(
            lambda: _admits_a_new_stream(stub, open_streams), "the second closed stream's place"
        )
        assert _outcomes(open_streams(stub, 1)) == [grpc.StatusCode.RESOURCE_EXHAUSTED]
        _unary_calls_answer(stub)


def test_a_tracing_server_caps_streams_too(
    make_server: Callable[..., ServerProcess],
    open_streams: Callable[[Any, int], list[Stream]],
) -> None:
    """A tracing server wraps its streams in spans: the same cap, the same refusal, unary calls
    and model control unaffected, places freed on close."""
    with otlp_receiver() as receiver:
        server = make_server(
            "--model-control-mode", "explicit", "--load-model", "simple",
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint},
        )  # fmt: skip
        with grpc.insecure_channel(server.grpc_url) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            streams = open_streams(stub, DEFAULT_CAP + 1)
            assert _outcomes(streams) == [None] * DEFAULT_CAP + [grpc.StatusCode.RESOURCE_EXHAUSTED]
            _unary_calls_answer(stub)
            _http_load_answers(server)
            streams[0].close()
            wait_for(lambda: _admits_a_new_stream(stub, open_streams), "a closed stream's place")
