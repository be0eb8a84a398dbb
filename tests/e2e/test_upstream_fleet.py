"""A fleet in front of one upstream computes each distinct request once: three real
``cachefleet serve --upstream`` replicas with ``--cache tiered`` on one real Redis, in front of
one ``cachefleet serve --cache none`` (the upstream), all real processes on loopback ports.

A burst of requests with a few distinct inputs, each sent several times to every replica at
once, arrives while the upstream is paused (SIGSTOP), as a burst of new keys arrives at a fleet
whose upstream is slow to answer: every request is in flight at every replica before any answer
exists. Then the upstream goes on. What a user notices, read from the upstream's own statistics
extension: it executed each distinct input exactly once (``execution_count``,
``inference_count`` and its successes grow by the number of distinct inputs, not of requests),
and every replica answered every request with the upstream's bytes.

The pause makes the test independent of the machine's speed: a replica that has not yet seen the
model's compute time waits for the fleet's lease holder up to ``--cache-fleet-max-wait``
(``cache.fleet_policy``), which here outlasts any load the machine may be under.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import tritonclient.http as httpclient
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import infer
from support.waiting import wait_for

pytestmark = pytest.mark.slow

REPLICAS = 3
DISTINCT = 6
#: Each distinct input, to every replica, this many times.
PER_REPLICA = 2
#: Outlasts the pause and the burst on a loaded machine: no waiter gives up on the holder.
MAX_WAIT_S = 120


@pytest.fixture(scope="module")
def fleet(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, list[ServerProcess]]]:
    """The upstream and the replicas in front of it, sharing one Redis."""
    logs = tmp_path_factory.mktemp("upstream-fleet")
    redis = RedisProcess(tmp_path_factory.mktemp("fleet-redis"))
    upstream = ServerProcess(["--model-repository", str(model_repository), "--cache", "none"], logs)
    wait = str(MAX_WAIT_S)
    args = ["--upstream", f"grpc://{upstream.grpc_url}", "--cache", "tiered",
            "--redis-url", redis.url, "--cache-fleet-max-wait", wait,
            # The paused upstream is not given up on (a refresh, a forwarded call).
            "--upstream-timeout", wait, "--upstream-control-timeout", wait]  # fmt: skip
    replicas = [ServerProcess(args, logs) for _ in range(REPLICAS)]
    try:
        redis.start()
        upstream.start()
        with ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(lambda replica: replica.start(), replicas))
        yield upstream, replicas
    finally:
        for server in (*replicas, upstream):
            server.stop()
        redis.stop()


def upstream_figures(upstream: ServerProcess) -> tuple[int, int, int]:
    """``simple``'s execution_count, inference_count and successes, as the upstream counts."""
    stats = httpclient.InferenceServerClient(upstream.url).get_inference_statistics("simple")
    (model,) = stats["model_stats"]
    return (
        int(model["execution_count"]),
        int(model["inference_count"]),
        int(model["inference_stats"]["success"]["count"]),
    )


def pending(replicas: list[ServerProcess]) -> int:
    """Requests for ``simple`` the replicas have accepted and not answered yet."""
    total = 0.0
    for replica in replicas:
        text = loopback.get(f"{replica.base_url}/metrics", timeout=30).text
        for found in re.finditer(
            r'^cachefleet_queue_pending\{model="simple".*\} (\S+)$', text, re.M
        ):
            total += float(found.group(1))
    return int(total)


def test_a_burst_over_the_fleet_executes_each_distinct_input_once_upstream(
    fleet: tuple[ServerProcess, list[ServerProcess]],
) -> None:
    upstream, replicas = fleet
    seeds = [1000 + 37 * n for n in range(DISTINCT)]
    sends = [(replica, seed) for replica in replicas for seed in seeds for _ in range(PER_REPLICA)]
    before = upstream_figures(upstream)
    gate = threading.Barrier(len(sends) + 1)

    def one(replica: ServerProcess, seed: int) -> tuple[int, bytes, str]:
        gate.wait()
        response, _ = infer(replica, "simple", seed)
        return seed, response.content, response.headers["X-Cache"]

    assert upstream.process is not None
    os.kill(upstream.pid, signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(len(sends)) as pool:
            answers = [pool.submit(one, replica, seed) for replica, seed in sends]
            gate.wait()
            wait_for(lambda: pending(replicas) == len(sends), "every request in flight", 120)
            os.kill(upstream.pid, signal.SIGCONT)
            results = [answer.result(timeout=300) for answer in answers]
    finally:
        os.kill(upstream.pid, signal.SIGCONT)

    executions, inferences, successes = (
        after - then for after, then in zip(upstream_figures(upstream), before, strict=True)
    )
    assert (executions, inferences, successes) == (DISTINCT, DISTINCT, DISTINCT)
    # Every answer is the upstream's own, byte for byte (asked now, outside the counts above).
    for seed in seeds:
        alone = _upstream_answer(upstream, seed)
        assert {body for s, body, _ in results if s == seed} == {alone}
    statuses = [status for _, _, status in results]
    assert set(statuses) <= {"miss", "hit-redis", "hit-local"}, statuses
    metrics = "".join(loopback.get(f"{r.base_url}/metrics", timeout=30).text for r in replicas)
    leases = re.findall(r'^cachefleet_cache_fleet_leases_total\{model="simple".*\} (\S+)$',
                        metrics, re.M)  # fmt: skip
    assert sum(float(value) for value in leases) == DISTINCT, "one lease holder per input"


def _upstream_answer(upstream: ServerProcess, seed: int) -> bytes:
    response: httpx.Response = infer(upstream, "simple", seed)[0]
    return response.content
