"""A Redis outage under load, end to end: no request fails, and hits come back by themselves."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

from support.processes import RedisProcess, ServerProcess
from support.sample_requests import x_cache


def test_redis_killed_and_restarted_while_requests_flow(
    make_server: Callable[..., ServerProcess], redis_server: RedisProcess
) -> None:
    server = make_server("--cache", "redis", "--redis-url", redis_server.url)
    stop = threading.Event()
    failures: list[BaseException] = []
    statuses: list[str] = []

    def load(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            try:
                statuses.append(x_cache(server, "simple", rng.randrange(20)))
            except BaseException as error:  # any failed request fails the test
                failures.append(error)

    threads = [threading.Thread(target=load, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        redis_server.kill()
        time.sleep(1.5)
        redis_server.start()
        time.sleep(1.5)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []
    assert "hit-redis" in statuses
    # Without restarting the server, the shared tier is used again.
    deadline = time.monotonic() + 15
    while x_cache(server, "simple", 99) != "hit-redis":
        assert time.monotonic() < deadline, "hits never resumed after Redis came back"
        time.sleep(0.1)
    metrics = server_metrics(server)
    assert 'cachefleet_cache_errors_total{kind="connection",tier="redis"}' in metrics
    assert "cachefleet_redis_circuit_open 0.0" in metrics


def server_metrics(server: ServerProcess) -> str:
    import httpx

    return httpx.get(f"{server.base_url}/metrics", timeout=10).text
