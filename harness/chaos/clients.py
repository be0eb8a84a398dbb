"""The client processes: keep-alive load on every server, every answer checked.

Each runs spawned, sharing nothing with the conductor, and hands back one
:class:`ClientResult` through a queue when its time is up.
"""

from __future__ import annotations

import http.client
import random
import time
from dataclasses import dataclass, field
from typing import Any

from harness.chaos.answers import (
    MODEL,
    PLANTED_BASE,
    PLANTED_COUNT,
    POOL_SIZE,
    answer_is_right,
    decode_outputs,
    request_body,
)

_UNIQUE_STRIDE = 10_000_000
SLOW_S = 0.02


@dataclass
class ClientResult:
    """What one client process saw. ``hit_redis_at`` are the wall-clock times at which the
    requests answered hit-redis were sent (so a request already in flight at a fault never
    counts as a hit after it)."""

    sent: int = 0
    failed: int = 0
    wrong: int = 0
    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[str, int] = field(default_factory=dict)
    hit_redis_at: list[float] = field(default_factory=list)
    #: the request seed of each ``hit_redis_at`` entry (cluster runs place it on a shard)
    hit_redis_seeds: list[int] = field(default_factory=list)
    #: (wall-clock start, seconds) of requests slower than :data:`SLOW_S`, to place stalls.
    slow: list[tuple[float, float]] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)


class _Client:
    """One process's loop: keep-alive connections to every server, every answer checked."""

    def __init__(self, index: int, urls: list[str], timeout_s: float, pace_s: float) -> None:
        self.rng = random.Random(index)
        self.pace_s = pace_s
        self.addresses = [url.removeprefix("http://").rsplit(":", 1) for url in urls]
        self.connections: list[http.client.HTTPConnection | None] = [None] * len(urls)
        self.timeout_s = timeout_s
        self.unique = (index + 1) * _UNIQUE_STRIDE
        self.result = ClientResult()

    def run_until(self, stop_at: float) -> ClientResult:
        while time.time() < stop_at:
            roll = self.rng.random()
            server = self.rng.randrange(len(self.connections))
            if roll < 0.45:
                self.send(server, self.rng.randrange(POOL_SIZE))
            elif roll < 0.65:
                self.send(server, self._next_unique())
            elif roll < 0.85:  # the second server should find the first one's answer in Redis
                seed = self._next_unique()
                self.send(server, seed)
                self.send((server + 1) % len(self.connections), seed)
            else:
                self.send(server, PLANTED_BASE + self.rng.randrange(PLANTED_COUNT))
            if self.pace_s:
                time.sleep(self.pace_s)
        for connection in self.connections:
            if connection is not None:
                connection.close()
        return self.result

    def _next_unique(self) -> int:
        self.unique += 1
        return self.unique

    def send(self, server: int, seed: int) -> None:
        body, headers = request_body(seed, binary=self.rng.random() < 0.5)
        result = self.result
        result.sent += 1
        started, wall = time.perf_counter(), time.time()
        try:
            status, reply, reply_headers = self._post(server, body, headers)
        except (OSError, http.client.HTTPException) as error:
            self._drop(server)
            result.failed += 1
            self._example(f"seed {seed}: {type(error).__name__}: {error}")
            return
        finally:
            elapsed = time.perf_counter() - started
            result.latencies_s.append(elapsed)
            if elapsed >= SLOW_S:
                result.slow.append((wall, elapsed))
        if status != 200:
            result.failed += 1
            self._example(f"seed {seed}: HTTP {status}: {reply[:200]!r}")
            return
        cache = reply_headers.get("x-cache", "?")
        result.statuses[cache] = result.statuses.get(cache, 0) + 1
        if cache == "hit-redis":
            result.hit_redis_at.append(wall)
            result.hit_redis_seeds.append(seed)
        try:
            right = answer_is_right(
                seed, decode_outputs(reply, reply_headers.get("inference-header-content-length"))
            )
        except (ValueError, KeyError, TypeError) as error:
            right = False
            self._example(f"seed {seed}: undecodable answer ({error})")
        if not right:
            result.wrong += 1
            self._example(f"seed {seed}: wrong answer, X-Cache {cache}")

    def _post(
        self, server: int, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        connection = self.connections[server]
        if connection is None:
            host, port = self.addresses[server]
            connection = http.client.HTTPConnection(host, int(port), timeout=self.timeout_s)
            self.connections[server] = connection
        connection.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers=headers)
        response = connection.getresponse()
        reply = response.read()
        return response.status, reply, {k.lower(): v for k, v in response.getheaders()}

    def _drop(self, server: int) -> None:
        connection, self.connections[server] = self.connections[server], None
        if connection is not None:
            connection.close()

    def _example(self, text: str) -> None:
        if len(self.result.examples) < 5:
            self.result.examples.append(text)


def client_main(
    index: int, urls: list[str], stop_at: float, timeout_s: float, pace_s: float, results: Any
) -> None:
    """Entry point of a client process (spawned, so it shares nothing with the conductor)."""
    results.put((index, _Client(index, urls, timeout_s, pace_s).run_until(stop_at)))
