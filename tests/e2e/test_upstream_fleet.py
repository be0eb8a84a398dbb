"""A fleet in front of one upstream computes each distinct request once: three real
``cachefleet serve --upstream`` replicas with ``--cache tiered`` on one real Redis, in front of
one ``cachefleet serve --cache none`` (the upstream), all real processes on loopback ports.

A burst of requests with a few distinct inputs, each sent several times to every replica at
once, arrives while the upstream is paused (``support.upstream_fleet``): every request is in
flight at every replica before any answer exists. Then the upstream goes on. What a user
notices, read from the upstream's own statistics extension: it executed each distinct input
exactly once (``execution_count``, ``inference_count`` and its successes grow by the number of
distinct inputs, not of requests), and every replica answered every request with the
upstream's bytes. (The same against real Triton: ``tests/triton_upstream/test_tritonserver.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import infer
from support.upstream_fleet import burst_while_paused, executed, leases

pytestmark = pytest.mark.slow

REPLICAS = 3
DISTINCT = 6
#: Each distinct input, to every replica, this many times.
PER_REPLICA = 2
#: Outlasts the pause and the burst on a loaded machine: no waiter gives up on the holder.
MAX_WAIT_S = "120"


@pytest.fixture(scope="module")
def fleet(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, list[ServerProcess]]]:
    """The upstream and the replicas in front of it, sharing one Redis."""
    logs = tmp_path_factory.mktemp("upstream-fleet")
    redis = RedisProcess(tmp_path_factory.mktemp("fleet-redis"))
    upstream = ServerProcess(["--model-repository", str(model_repository), "--cache", "none"], logs)
    args = ["--upstream", f"grpc://{upstream.grpc_url}", "--cache", "tiered",
            "--redis-url", redis.url, "--cache-fleet-max-wait", MAX_WAIT_S,
            "--upstream-timeout", MAX_WAIT_S, "--upstream-control-timeout", MAX_WAIT_S]  # fmt: skip
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


def test_a_burst_over_the_fleet_executes_each_distinct_input_once_upstream(
    fleet: tuple[ServerProcess, list[ServerProcess]],
) -> None:
    upstream, replicas = fleet
    seeds = [1000 + 37 * n for n in range(DISTINCT)]
    before = executed(upstream.url, "simple")
    answers = burst_while_paused(upstream.pid, replicas, "simple", seeds, PER_REPLICA)
    grew = [
        after - then for after, then in zip(executed(upstream.url, "simple"), before, strict=True)
    ]
    assert grew == [DISTINCT] * 3, "execution_count, inference_count, successes"
    # Every answer is the upstream's own, byte for byte (asked now, outside the counts above).
    for seed in seeds:
        alone = infer(upstream, "simple", seed)[0].content
        assert {body for s, body, _ in answers if s == seed} == {alone}
    statuses = {status for _, _, status in answers}
    assert statuses <= {"miss", "hit-redis", "hit-local"}, statuses
    assert leases(replicas, "simple") == DISTINCT, "one lease holder per input"
