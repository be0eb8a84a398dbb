"""One computation per fleet, end to end: four real servers on one real Redis, a burst of
identical densenet requests sent to all four at once, tritonclient's encoding, real ONNX Runtime.

The model's executions are read from each server's ``nv_inference_exec_count``: the burst runs
the model once in the whole fleet, and every answer is the bytes of the uncached answer. With
Redis frozen (SIGSTOP) in the middle of a burst, every request still answers within the
waiting deadline plus a margin (a bound for a loaded machine, not a speed measurement).
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import infer

MODEL = "densenet_onnx"
REPLICAS = 4
PER_REPLICA = 3
#: Long enough for a densenet run on a loaded machine (a holder slower than this lets the
#: waiters compute too); waiters still look every quarter of it, and a failed look ends a wait.
MAX_WAIT_S = 8.0
#: Generous on a 2-core machine shared with other work: a frozen Redis must not hold a request
#: for minutes (without the deadline a waiter would wait until Redis came back).
MARGIN_S = 15.0

pytestmark = [pytest.mark.slow, pytest.mark.full_samples]


@pytest.fixture(scope="module")
def fleet(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RedisProcess, list[ServerProcess]]]:
    redis = RedisProcess(tmp_path_factory.mktemp("redis"))
    redis.start()
    logs = tmp_path_factory.mktemp("servers")
    args = ["--model-repository", str(model_repository), "--cache", "redis",
            "--redis-url", redis.url, "--cache-fleet-max-wait", str(MAX_WAIT_S),
            "--model-control-mode", "explicit", "--load-model", MODEL]  # fmt: skip
    servers = [ServerProcess(args, logs) for _ in range(REPLICAS)]
    try:
        with ThreadPoolExecutor(REPLICAS) as pool:  # densenet loads in about a second each
            list(pool.map(lambda server: server.start(), servers))
        yield redis, servers
    finally:
        for server in servers:
            server.stop()
        redis.stop()


def executions(server: ServerProcess) -> int:
    text = loopback.get(f"{server.base_url}/metrics", timeout=30).text
    series = rf'^nv_inference_exec_count{{model="{MODEL}",version="1"}} (\S+)$'
    found = re.search(series, text, re.MULTILINE)
    return int(float(found.group(1))) if found else 0


def uncached(server: ServerProcess, seed: int) -> bytes:
    response, _ = infer(server, MODEL, seed, headers={"Cache-Control": "no-store"})
    assert response.headers["X-Cache"] == "bypass"
    return response.content


def burst(
    servers: list[ServerProcess], seed: int, during: Callable[[], None] = lambda: None
) -> list[tuple[bytes, str, float]]:
    """PER_REPLICA identical requests to every server, released at once; ``during`` runs once
    they are sent. Each answer's body, X-Cache and seconds from release to answer."""
    gate = threading.Barrier(len(servers) * PER_REPLICA + 1)

    def one(server: ServerProcess) -> tuple[bytes, str, float]:
        gate.wait()
        started = time.monotonic()
        response, _ = infer(server, MODEL, seed)
        return response.content, response.headers["X-Cache"], time.monotonic() - started

    targets = [server for server in servers for _ in range(PER_REPLICA)]
    with ThreadPoolExecutor(len(targets)) as pool:
        answers = [pool.submit(one, server) for server in targets]
        gate.wait()
        during()
        return [answer.result() for answer in answers]


def test_a_burst_on_four_replicas_runs_the_model_once(
    fleet: tuple[RedisProcess, list[ServerProcess]],
) -> None:
    _, servers = fleet
    expected = uncached(servers[0], seed=1)
    before = sum(executions(server) for server in servers)
    answers = burst(servers, seed=1)
    assert sum(executions(server) for server in servers) - before == 1
    assert all(body == expected for body, _, _ in answers)
    assert {status for _, status, _ in answers} <= {"miss", "hit-redis"}
    assert sum(1 for _, status, _ in answers if status == "hit-redis") >= (REPLICAS - 1)
    metrics = "".join(loopback.get(f"{s.base_url}/metrics", timeout=30).text for s in servers)
    leases = r'cachefleet_cache_fleet_leases_total\{model="densenet_onnx".*\} 1\.0'
    assert re.search(leases, metrics)
    assert 'result="filled"' in metrics


def test_a_frozen_redis_mid_burst_delays_no_request_past_the_deadline(
    fleet: tuple[RedisProcess, list[ServerProcess]],
) -> None:
    redis, servers = fleet
    expected = uncached(servers[0], seed=2)
    assert redis.process is not None
    pid = redis.process.pid
    frozen = threading.Event()

    def freeze() -> None:
        time.sleep(0.2)  # lookups and the lease are out; the holder computes, others wait
        os.kill(pid, signal.SIGSTOP)
        frozen.set()

    try:
        answers = burst(servers, seed=2, during=freeze)
    finally:
        if frozen.is_set():
            os.kill(pid, signal.SIGCONT)
    slowest = max(seconds for _, _, seconds in answers)
    assert slowest < MAX_WAIT_S + MARGIN_S, f"a request took {slowest:.1f} s"
    assert all(body == expected for body, _, _ in answers)
    # Redis is back: the fleet still answers, and shares again.
    assert uncached(servers[1], seed=3)
