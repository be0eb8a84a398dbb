"""Fixtures for Redis past one node: a real Redis Cluster and a real Sentinel, plus a load loop.

Loaded by the modules that need them with ``pytest_plugins = ("support.redis_topology",)``.
The processes come from :mod:`support.redis_nodes` (the cluster is the one the bench and the
chaos run start); every one is stopped at teardown and lives in a pytest temp folder.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.chaos.answers import MODEL, answer_is_right, decode_outputs, request_body
from support.redis_nodes import ClusterProcesses, SentinelProcesses


def _cluster(tmp_path_factory: pytest.TempPathFactory, replicas: int) -> Iterator[ClusterProcesses]:
    """A started cluster of three primaries with ``replicas`` each, stopped afterwards."""
    cluster = ClusterProcesses(tmp_path_factory.mktemp("cluster"), primaries=3, replicas=replicas)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    """Three primaries, no replicas."""
    yield from _cluster(tmp_path_factory, replicas=0)


@pytest.fixture
def redis_cluster_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterProcesses]:
    """Three primaries with one replica each."""
    yield from _cluster(tmp_path_factory, replicas=1)


@pytest.fixture
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelProcesses]:
    """A primary, its replica, and a Sentinel watching them."""
    sentinel = SentinelProcesses(Path(tmp_path_factory.mktemp("sentinel")))
    try:
        sentinel.start()
        yield sentinel
    finally:
        sentinel.stop()


@dataclass
class Answer:
    """One request of the load loop: when it was sent, its seed, and how it was answered."""

    at: float
    seed: int
    status: int
    cache: str
    right: bool


@dataclass
class LoadLoop:
    """Threads that send ``simple`` requests over a fixed pool of seeds to every server, and
    check every answer against numpy's. Each thread alternates servers, so a seed answered by
    one is looked up by the other (a Redis hit with ``--cache redis``)."""

    urls: list[str]
    seeds: list[int]
    threads: int = 3
    answers: list[Answer] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _workers: list[threading.Thread] = field(default_factory=list)

    def start(self) -> LoadLoop:
        for index in range(self.threads):
            worker = threading.Thread(target=self._run, args=(index,), daemon=True)
            worker.start()
            self._workers.append(worker)
        return self

    def stop(self) -> None:
        self._stop.set()
        for worker in self._workers:
            worker.join(60)

    def __enter__(self) -> LoadLoop:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _run(self, index: int) -> None:
        connections: dict[int, http.client.HTTPConnection] = {}
        turn = index
        while not self._stop.is_set():
            seed = self.seeds[turn % len(self.seeds)]
            server = (turn // len(self.seeds) + index) % len(self.urls)
            turn += 1
            self._send(connections, server, seed)
        for connection in connections.values():
            connection.close()

    def _send(
        self, connections: dict[int, http.client.HTTPConnection], server: int, seed: int
    ) -> None:
        body, headers = request_body(seed, binary=True)
        sent = time.monotonic()
        try:
            connection = connections.get(server)
            if connection is None:
                host, port = self.urls[server].removeprefix("http://").rsplit(":", 1)
                connection = http.client.HTTPConnection(host, int(port), timeout=30)
                connections[server] = connection
            connection.request("POST", f"/v2/models/{MODEL}/infer", body=body, headers=headers)
            response = connection.getresponse()
            reply = response.read()
        except (OSError, http.client.HTTPException) as error:
            connections.pop(server, None)
            self.errors.append(f"seed {seed}: {type(error).__name__}: {error}")
            self.answers.append(Answer(sent, seed, 0, "", False))
            return
        cache = response.getheader("X-Cache", "")
        right = response.status == 200 and answer_is_right(
            seed, decode_outputs(reply, response.getheader("Inference-Header-Content-Length"))
        )
        self.answers.append(Answer(sent, seed, response.status, cache, right))

    def between(self, start: float, end: float = float("inf")) -> list[Answer]:
        return [a for a in list(self.answers) if start <= a.at < end]

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        """Wait until ``count`` more answers have come back."""
        target = len(self.answers) + count
        deadline = time.monotonic() + timeout_s
        while len(self.answers) < target:
            assert time.monotonic() < deadline, f"load stalled at {len(self.answers)} answers"
            time.sleep(0.05)

    def wait_for_after(self, moment: float, count: int, timeout_s: float = 60) -> None:
        """Wait until ``count`` answers to requests sent from ``moment`` on have come back."""
        deadline = time.monotonic() + timeout_s
        while len(self.between(moment)) < count:
            assert time.monotonic() < deadline, f"load stalled at {len(self.answers)} answers"
            time.sleep(0.05)

    @property
    def failed(self) -> list[Answer]:
        return [a for a in list(self.answers) if a.status != 200 or not a.right]
