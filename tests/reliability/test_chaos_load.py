"""Sustained load from client processes on two tiered servers sharing one real Redis, while
Redis is killed and restarted, paused, filled, and fed corrupt and foreign entries: no request
fails and no answer differs from the model's own (numpy computes it here)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support import loopback
from support.processes import RedisProcess, ServerProcess

from harness.chaos.control import ChaosOptions
from harness.chaos.report import render_table
from harness.chaos.run import run_chaos

pytestmark = pytest.mark.slow


def test_two_servers_one_redis_under_faults_never_fail_or_lie(
    make_redis: Callable[..., RedisProcess], make_server: Callable[..., ServerProcess]
) -> None:
    redis = make_redis()
    servers = [make_server("--cache", "tiered", "--redis-url", redis.url) for _ in range(2)]
    report = run_chaos(
        [server.base_url for server in servers],
        redis,
        ChaosOptions(duration_s=20.0, clients=3, cycle_s=20.0, pace_s=0.01),
        log=lambda line: None,
    )
    print(render_table(report))
    assert (report.failed, report.wrong) == (0, 0), report.examples
    # Every kind of answer happened, so every path was checked against numpy.
    assert {"miss", "hit-local", "hit-redis"} <= report.statuses.keys()
    # Planted entries reached the servers and were refused (a wrong answer would show above).
    assert report.cache_errors.get("corrupt", 0) > 0
    # The faults were felt: outages and a full Redis were counted, never surfaced.
    assert report.cache_errors.get("connection", 0) > 0
    assert report.cache_errors.get("oom", 0) > 0
    assert report.cache_errors.get("timeout", 0) > 0
    # After each restart Redis hits came back without restarting the servers.
    assert report.resume_s
    assert None not in report.resume_s
    for server in servers:
        assert loopback.get(f"{server.base_url}/v2/health/ready", timeout=10).status_code == 200
