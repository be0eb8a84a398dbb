"""What a gRPC connection may hold, attacked from outside over raw sockets: a real server, real
tritonclient calls beside the attack.

- Connections past ``--grpc-max-connections`` that send the HTTP/2 preface and then nothing are
  closed as they are accepted, while a client already connected still infers over gRPC and a new
  HTTP client still infers.
- Under a small ``nofile`` (``prlimit``), the default caps are lowered to fit it at start (one
  warning): a flood of gRPC connections no longer takes the descriptors HTTP needs.
- A connection without calls is closed after ``--grpc-max-connection-idle``; one that never
  finishes its handshake after ``--grpc-handshake-timeout``; one held busy by an idle stream
  after ``--grpc-max-connection-age`` and its grace.
"""

from __future__ import annotations

import queue
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support.processes import ServerProcess
from support.sample_requests import simple_grpc_request
from support.waiting import wait_for
from tritonclient.grpc import service_pb2_grpc

#: HTTP/2's client preface and an empty SETTINGS frame: what every gRPC client sends first.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
#: Seconds within which what must happen has happened (a bounded wait, not a timing).
WITHIN_S = 60


def preface_connection(port: int) -> socket.socket:
    """A TCP connection to ``port`` that sent the preface and will send nothing more."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=WITHIN_S)
    connection.sendall(PREFACE)
    connection.setblocking(False)
    return connection


def silent_connection(port: int) -> socket.socket:
    """A TCP connection to ``port`` that sends nothing at all."""
    connection = socket.create_connection(("127.0.0.1", port), timeout=WITHIN_S)
    connection.setblocking(False)
    return connection


def closed_by_server(connection: socket.socket) -> bool:
    """True once the server closed ``connection`` (what it sent before is read and dropped)."""
    try:
        while True:
            if connection.recv(65536) == b"":
                return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for connection in opened:
        connection.close()


def _simple_inputs(module: Any) -> tuple[np.ndarray, list[Any]]:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(data)
        inputs.append(tensor)
    return data, inputs


def _grpc_infers(client: grpcclient.InferenceServerClient) -> None:
    data, inputs = _simple_inputs(grpcclient)
    result = client.infer("simple", inputs, client_timeout=WITHIN_S)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)


def _http_infers(server: ServerProcess) -> None:
    """A new HTTP connection is accepted and answered."""
    data, inputs = _simple_inputs(httpclient)
    with httpclient.InferenceServerClient(
        server.url, connection_timeout=WITHIN_S, network_timeout=WITHIN_S
    ) as client:
        result = client.infer("simple", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), data + data)


def test_preface_connections_past_the_cap_are_closed_while_inference_answers(
    make_server: Callable[..., ServerProcess], sockets: list[socket.socket]
) -> None:
    cap, flood = 8, 80
    server = make_server("--grpc-max-connections", str(cap))
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        _grpc_infers(client)  # connected before the flood: it holds one of the places
        sockets.extend(preface_connection(server.grpc_port) for _ in range(flood))

        def closed() -> int:
            return sum(closed_by_server(connection) for connection in sockets)

        # Every connection past the cap is closed; at most cap - 1 of the flood stay open.
        wait_for(lambda: closed() >= flood - (cap - 1), "connections past the cap closed", WITHIN_S)
        _grpc_infers(client)
        _http_infers(server)


def test_a_small_nofile_limit_keeps_descriptors_for_http(
    model_repository: Path, tmp_path: Path, sockets: list[socket.socket]
) -> None:
    """The issue's attack, scaled to a small limit: with default caps (1,024 each) and
    ``nofile`` 256, idle gRPC connections took every descriptor and HTTP stopped answering."""
    nofile, flood = 256, 400
    server = ServerProcess(
        ["--model-repository", str(model_repository)],
        tmp_path,
        wrapper=["prlimit", f"--nofile={nofile}:{nofile}", "--"],
    )
    server.start()
    try:
        assert "open-file limit (nofile) 256 is below what the connection caps need" in (
            server.log()
        )
        for _ in range(flood):
            try:
                sockets.append(preface_connection(server.grpc_port))
            except OSError:  # the server's backlog is full: the rest of the flood is refused
                break
        _http_infers(server)
        # The gRPC connections past gRPC's share of the limit are closed, not left holding it.
        share = nofile // 2
        wait_for(
            lambda: sum(not closed_by_server(c) for c in sockets) <= share,
            f"at most {share} gRPC connections left open",
            WITHIN_S,
        )
    finally:
        server.stop()


def test_an_idle_connection_is_closed_and_clients_reconnect(
    make_server: Callable[..., ServerProcess], sockets: list[socket.socket]
) -> None:
    server = make_server("--grpc-max-connection-idle", "1")
    sockets.append(preface_connection(server.grpc_port))
    wait_for(lambda: closed_by_server(sockets[0]), "the idle connection closed", WITHIN_S)
    states: list[grpc.ChannelConnectivity] = []
    with grpc.insecure_channel(server.grpc_url) as channel:
        channel.subscribe(states.append)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ModelInfer(simple_grpc_request(), timeout=WITHIN_S).outputs

        def let_go() -> bool:
            """The channel went idle again after it was connected (the server's GOAWAY)."""
            ready = grpc.ChannelConnectivity.READY
            return (
                ready in states and grpc.ChannelConnectivity.IDLE in states[states.index(ready) :]
            )

        wait_for(let_go, "the idle channel let go by the server", WITHIN_S)
        # The next call reconnects.
        assert stub.ModelInfer(simple_grpc_request(), timeout=WITHIN_S).outputs


def test_a_connection_that_never_finishes_its_handshake_is_closed(
    make_server: Callable[..., ServerProcess], sockets: list[socket.socket]
) -> None:
    server = make_server("--grpc-handshake-timeout", "1")
    sockets.append(silent_connection(server.grpc_port))
    # gRPC core's own deadline is minutes: this one is seconds.
    wait_for(lambda: closed_by_server(sockets[0]), "the silent connection closed", WITHIN_S / 2)


def test_a_connection_held_by_an_idle_stream_is_closed_at_its_age(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--grpc-max-connection-age", "1", "--grpc-max-connection-age-grace", "1")
    requests: queue.Queue[Any] = queue.Queue()
    requests.put(simple_grpc_request())
    ended: list[grpc.StatusCode] = []
    with grpc.insecure_channel(server.grpc_url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        call = stub.ModelStreamInfer(iter(requests.get, None))
        assert not next(call).error_message  # open, answered, then idle: sends nothing more

        def read() -> None:
            try:
                for _ in call:
                    pass
            except grpc.RpcError as error:
                ended.append(error.code())

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        wait_for(lambda: ended, "the stream ended with its connection", WITHIN_S)
        call.cancel()
    assert ended == [grpc.StatusCode.UNAVAILABLE]
