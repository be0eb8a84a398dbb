"""Cache admission on a real server and a real Redis: with ``auto``, a model for which Redis
only costs (no repeats: nothing to save) stops touching Redis but for the probe sample, and
says so in ``/metrics`` and the statistics; with ``always`` every request still goes to Redis.

The requests never repeat, so the expected saving is negative whatever the machine measures
(the hit ratio is 0): the decision does not depend on timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import tritonclient.http as httpclient
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import x_cache
from support.waiting import wait_for

MakeServer = Callable[..., ServerProcess]
#: Enough lookups for the policy to decide (it needs 32), then the measured stretch.
DECIDING, MEASURED = 48, 400


def redis_gets(redis: RedisProcess) -> int:
    stats = redis.client().info("commandstats")
    return int(stats.get("cmdstat_get", {}).get("calls", 0))


def send(server: ServerProcess, seeds: range) -> list[str]:
    return [x_cache(server, "simple", seed) for seed in seeds]


def admitted_gauge(server: ServerProcess, tier: str) -> float | None:
    text = loopback.get(f"{server.base_url}/metrics", timeout=10).text
    wanted = f'cachefleet_cache_admitted{{model="simple",tier="{tier}",version="1"}} '
    for line in text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[-1])
    return None


@pytest.fixture
def statistics_of() -> Iterator[Callable[[ServerProcess], dict[str, object]]]:
    clients: list[httpclient.InferenceServerClient] = []

    def read(server: ServerProcess) -> dict[str, object]:
        client = httpclient.InferenceServerClient(server.url)
        clients.append(client)
        (stats,) = client.get_inference_statistics("simple", "1")["model_stats"]
        return {each["tier"]: each for each in stats["cache_admission"]}

    yield read
    for client in clients:
        client.close()


def test_auto_stops_sending_a_cheap_model_to_redis_but_for_probes(
    make_server: MakeServer,
    redis_server: RedisProcess,
    statistics_of: Callable[[ServerProcess], dict[str, object]],
) -> None:
    server = make_server(
        "--cache", "redis", "--redis-url", redis_server.url, "--cache-admission", "auto"
    )  # fmt: skip
    assert admitted_gauge(server, "redis") is None, "nothing measured before a request"
    send(server, range(DECIDING))
    assert admitted_gauge(server, "redis") == 0.0

    redis_server.client().config_resetstat()
    statuses = send(server, range(10_000, 10_000 + MEASURED))
    gets = redis_gets(redis_server)
    # The probes: 1 in 256 keys, plus what 2 % of the model's compute time pays for. Under load
    # a preempted model thread measures a longer compute, which pays for more probes (one run at
    # a load average of 12 went past a tenth), so the bound is what a user notices: most misses
    # no longer go to Redis.
    assert gets < MEASURED // 4, gets
    assert statuses.count("bypass") == MEASURED - gets
    assert set(statuses) <= {"bypass", "miss"}
    redis_figures = statistics_of(server)["redis"]
    assert isinstance(redis_figures, dict)
    assert redis_figures["admitted"] is False
    assert redis_figures["hit_ratio"] == 0.0
    assert redis_figures["expected_saving_ns"] < 0


def test_always_keeps_every_request_on_redis(
    make_server: MakeServer,
    redis_server: RedisProcess,
    statistics_of: Callable[[ServerProcess], dict[str, object]],
) -> None:
    server = make_server(
        "--cache",
        "redis",
        "--redis-url",
        redis_server.url,
        env={"CACHEFLEET_CACHE_ADMISSION": "always"},
    )
    send(server, range(DECIDING))
    redis_server.client().config_resetstat()
    statuses = send(server, range(20_000, 20_000 + MEASURED))
    assert redis_gets(redis_server) == MEASURED
    assert statuses == ["miss"] * MEASURED
    assert admitted_gauge(server, "redis") == 1.0
    redis_figures = statistics_of(server)["redis"]
    assert isinstance(redis_figures, dict)
    assert redis_figures["admitted"] is True
    assert redis_figures["expected_saving_ns"] < 0, "measured all the same"


def test_a_server_that_only_ever_hits_redis_measures_the_model_and_decides(
    make_server: MakeServer,
    redis_server: RedisProcess,
    statistics_of: Callable[[ServerProcess], dict[str, object]],
) -> None:
    """Entries another server left in Redis answer every request, so nothing is computed on
    this server: it still computes a request now and then, measures the model, and decides
    (before, it stayed "not measured", Redis looked up for ever whatever it cost)."""
    filler = make_server(
        "--cache", "redis", "--redis-url", redis_server.url, "--cache-admission", "always"
    )  # fmt: skip
    assert set(send(filler, range(16))) == {"miss"}
    wait_for(lambda: len(redis_server.client().keys("cachefleet:*")) >= 16, "the inserts")

    server = make_server(
        "--cache", "redis", "--redis-url", redis_server.url, "--cache-admission", "auto"
    )  # fmt: skip
    statuses = [x_cache(server, "simple", seed % 16) for seed in range(DECIDING + 64)]
    assert statuses[:32] == ["hit-redis"] * 32, "a fresh model caches as before"
    assert "bypass" in statuses, "computed to measure it"
    assert set(statuses) <= {"hit-redis", "bypass"}
    redis_figures = statistics_of(server)["redis"]
    assert isinstance(redis_figures, dict)
    assert isinstance(redis_figures["computes"], int)
    assert redis_figures["computes"] >= 1
    assert redis_figures["expected_saving_ns"] is not None
    assert admitted_gauge(server, "redis") in (0.0, 1.0)
