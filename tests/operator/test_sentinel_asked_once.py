"""The Sentinel address checked against the allowed hosts is the one the operator dials.

The external Redis URL, and so its Sentinel, is the tenant's. A Sentinel the tenant runs may
name an allowed primary when the operator checks, and another host when it is asked again on
connecting: here a Sentinel (a small RESP server on loopback, answering as Sentinel does) names
a real ``redis-server`` at 127.0.0.1 the first time and another real one at ``localhost`` (not
allowed) after that. The operator must ask once, and read INFO from the primary it checked.
"""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.processes import RedisProcess

from cachefleet.operator.reconcile.redis_topology import ExternalRedis, read_topology_figures

MASTER = "mymaster"


def _read_command(stream: Any) -> list[str] | None:
    """One RESP command (an array of bulk strings), or None when the client has gone."""
    head = stream.readline()
    if not head:
        return None
    if not head.startswith(b"*"):
        return list(str(head.decode()).split())  # an inline command
    parts = []
    for _ in range(int(head[1:])):
        length = int(stream.readline()[1:])
        parts.append(stream.read(length + 2)[:-2].decode())
    return parts


def _bulks(items: list[str]) -> bytes:
    return b"".join(f"${len(i.encode())}\r\n{i}\r\n".encode() for i in items)


def _map(pairs: list[str]) -> bytes:
    """A RESP3 map (redis-py speaks RESP3 after HELLO 3)."""
    return f"%{len(pairs) // 2}\r\n".encode() + _bulks(pairs)


class HostileSentinel(socketserver.ThreadingTCPServer):
    """Names ``first`` as the primary once, ``then`` on every later ask."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, first: tuple[str, int], then: tuple[str, int]) -> None:
        self.answers = [first, then]
        self.asked = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    def primary(self) -> tuple[str, int]:
        with self.lock:
            self.asked += 1
            return self.answers[min(self.asked, 2) - 1]


class _Handler(socketserver.StreamRequestHandler):
    server: HostileSentinel

    def handle(self) -> None:
        while (command := _read_command(self.rfile)) is not None:
            words = [w.lower() for w in command[:2]]
            if words[:1] == ["hello"]:
                self.wfile.write(b"%2\r\n" + _bulks(["server", "redis", "proto"]) + b":3\r\n")
            elif words == ["sentinel", "masters"]:
                host, port = self.server.primary()
                state = ["name", MASTER, "ip", host, "port", str(port), "flags", "master",
                         "num-other-sentinels", "0"]  # fmt: skip
                self.wfile.write(b"*1\r\n" + _map(state))
            elif words == ["sentinel", "get-master-addr-by-name"]:
                host, port = self.server.primary()
                self.wfile.write(b"*2\r\n" + _bulks([host, str(port)]))
            else:
                self.wfile.write(b"+OK\r\n")  # PING, CLIENT SETINFO, ...


@pytest.fixture
def sentinel_naming(
    make_redis: Callable[..., RedisProcess],
) -> Iterator[tuple[HostileSentinel, RedisProcess, RedisProcess]]:
    allowed = make_redis("--maxmemory", "1mb")
    other = make_redis("--maxmemory", "2mb")
    server = HostileSentinel(("127.0.0.1", allowed.port), ("localhost", other.port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, allowed, other
    finally:
        server.shutdown()
        server.server_close()


def connections(redis_at: RedisProcess) -> int:
    return int(redis_at.client().info("stats")["total_connections_received"])


def test_the_primary_checked_is_the_one_read_and_sentinel_is_asked_once(
    sentinel_naming: tuple[HostileSentinel, RedisProcess, RedisProcess],
) -> None:
    sentinel, _, other = sentinel_naming
    before = connections(other)
    url = f"redis://127.0.0.1:{sentinel.server_address[1]}"
    figures = read_topology_figures(
        ExternalRedis(url, "sentinel", MASTER, None, 5.0, allowed_hosts=("127.0.0.1",))
    )
    assert figures.maxmemory_bytes == 1024 * 1024  # the allowed primary's INFO
    assert sentinel.asked == 1
    assert connections(other) == before + 1  # only this test's own look, never the operator
