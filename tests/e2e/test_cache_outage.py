"""A Redis outage under load, end to end: no request fails, and hits come back by themselves."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import x_cache
from support.waiting import wait_for


def test_redis_killed_and_restarted_while_requests_flow(
    make_server: Callable[..., ServerProcess], redis_server: RedisProcess
) -> None:
    server = make_server("--cache", "redis", "--redis-url", redis_server.url)
    stop = threading.Event()
    failures: list[BaseException] = []
    #: (phase when the request was sent, X-Cache). The phase moves on only after the fault
    #: happened (Redis killed, Redis answering again), so no request straddles a change; a
    #: request sent while Redis is being started again is "restarting", judged by neither.
    statuses: list[tuple[str, str]] = []
    phase = ["up"]

    def load(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            sent_in = phase[0]
            try:
                statuses.append((sent_in, x_cache(server, "simple", rng.randrange(20))))
            except BaseException as error:  # any failed request fails the test
                failures.append(error)

    def seen(wanted: Callable[[str, str], bool], what: str, count: int = 1) -> None:
        def enough() -> bool:
            assert not failures, failures[0]
            return sum(wanted(*status) for status in list(statuses)) >= count

        wait_for(enough, what, timeout_s=20)

    threads = [threading.Thread(target=load, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    try:
        seen(lambda p, s: s == "hit-redis", "a Redis hit before the outage")
        redis_server.kill()
        # A request sent right after the kill may still join an identical one whose Redis
        # answer was read before it (single-flight): the outage counts from its first miss.
        phase[0] = "killed"
        seen(lambda p, s: (p, s) == ("killed", "miss"), "a miss once Redis is gone")
        phase[0] = "down"
        seen(lambda p, s: p == "down", "40 requests during the outage", 40)
        # Redis answers before start() returns (it polls for that): a request sent meanwhile
        # may already reach it, so it belongs to neither phase.
        phase[0] = "restarting"
        redis_server.start()
        phase[0] = "back"
        # Under the same load, without restarting the server, the shared tier answers again.
        seen(lambda p, s: (p, s) == ("back", "hit-redis"), "a Redis hit after the restart")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []
    during = {status for sent_in, status in statuses if sent_in == "down"}
    assert during == {"miss"}, "while Redis is down every request runs the model"
    # A new key too: the restarted (empty) Redis takes inserts and serves them.
    wait_for(lambda: x_cache(server, "simple", 99) == "hit-redis", "a hit-redis on a new key", 15)
    metrics = server_metrics(server)
    assert 'cachefleet_cache_errors_total{kind="connection",tier="redis"}' in metrics
    assert "cachefleet_redis_circuit_open 0.0" in metrics


def server_metrics(server: ServerProcess) -> str:

    return loopback.get(f"{server.base_url}/metrics", timeout=10).text
