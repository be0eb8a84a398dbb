"""The status's cache figures from an external Redis Cluster (every primary, summed) and from
Sentinel's current primary, read from real processes."""

from __future__ import annotations

import pytest
from support.redis_nodes import (
    MASTER_NAME,
    ClusterProcesses,
    SentinelProcesses,
    command,
    info,
)

from cachefleet.operator.reconcile.redis_live import RedisLiveError
from cachefleet.operator.reconcile.redis_topology import ExternalRedis, read_topology_figures

pytest_plugins = ("support.redis_topology",)


def test_cluster_figures_are_summed_over_every_primary(redis_cluster: ClusterProcesses) -> None:
    import redis.cluster

    client = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    for index in range(30):
        client.set(f"k{index}", "v")
    for index in range(30):
        client.get(f"k{index}")
    client.get("missing")
    client.close()
    primaries = redis_cluster.primary_ports()
    assert len(primaries) == 3
    figures = read_topology_figures(ExternalRedis(redis_cluster.url, "cluster", None, None, 2.0))
    per_node = [info(port, "stats") for port in primaries]
    assert figures.keyspace_hits == sum(int(s["keyspace_hits"]) for s in per_node) >= 30
    assert figures.keyspace_misses == sum(int(s["keyspace_misses"]) for s in per_node) >= 1
    memory = [int(info(port, "memory")["used_memory"]) for port in primaries]
    assert figures.used_memory_bytes >= max(memory)  # a sum, not one node's figure
    assert figures.to_status()["hitRatio"]


def test_sentinel_figures_come_from_the_current_primary(redis_sentinel: SentinelProcesses) -> None:
    primary = redis_sentinel.primary_port()
    command(primary, "SET", "a", "1")
    command(primary, "GET", "a")
    figures = read_topology_figures(
        ExternalRedis(redis_sentinel.url, "sentinel", MASTER_NAME, None, 2.0)
    )
    assert figures.keyspace_hits == int(info(primary, "stats")["keyspace_hits"]) >= 1
    new = redis_sentinel.failover()
    command(new, "GET", "a")
    command(new, "GET", "a")
    after = read_topology_figures(
        ExternalRedis(redis_sentinel.url, "sentinel", MASTER_NAME, None, 2.0)
    )
    assert after.keyspace_hits == int(info(new, "stats")["keyspace_hits"])


def test_an_unreachable_cluster_is_an_error(redis_cluster: ClusterProcesses) -> None:
    url = redis_cluster.url
    redis_cluster.stop()
    with pytest.raises(RedisLiveError, match=r"cluster Redis at redis://127\.0\.0\.1"):
        read_topology_figures(ExternalRedis(url, "cluster", None, None, 0.5))
