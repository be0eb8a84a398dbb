"""The chaos run's cluster variant: load from client processes on two tiered servers sharing a
real Redis Cluster (three primaries, a replica each) while one shard at a time is killed and
restarted, failed over by hand, paused and filled, with corrupt and foreign entries planted:
no request fails, no answer is wrong, and the struck shard's keys hit again afterwards."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from support.processes import ServerProcess
from support.redis_nodes import ClusterProcesses

from harness.chaos.control import ChaosOptions
from harness.chaos.report import render_table
from harness.chaos.run import run_cluster_chaos

pytest_plugins = ("support.redis_topology",)


pytestmark = pytest.mark.slow


def test_two_servers_one_cluster_under_shard_faults_never_fail_or_lie(
    redis_cluster_replicas: ClusterProcesses, make_server: Callable[..., ServerProcess]
) -> None:
    cluster = redis_cluster_replicas
    servers = [
        make_server("--cache", "tiered", "--redis-mode", "cluster", "--redis-url", cluster.url)
        for _ in range(2)
    ]
    report = run_cluster_chaos(
        [server.base_url for server in servers],
        cluster,
        ChaosOptions(duration_s=20.0, clients=3, cycle_s=20.0, pace_s=0.01),
        log=lambda line: None,
    )
    print(render_table(report))
    assert (report.failed, report.wrong) == (0, 0), report.examples
    assert {"miss", "hit-local", "hit-redis"} <= report.statuses.keys()
    assert report.cache_errors.get("corrupt", 0) > 0
    # One kill and one manual failover were measured, and the struck shard's keys hit again.
    assert len(report.resume_s) == 2
    assert None not in report.resume_s
    phases = {phase for _, phase, _ in report.faults.events}
    assert {"primary down", "after restart", "manual failover", "primary paused"} <= phases
