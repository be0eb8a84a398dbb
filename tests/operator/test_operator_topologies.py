"""The operator with an external Redis Cluster or Sentinel: the pods get the mode, and the
status's cache figures come from every primary (summed) or from Sentinel's current primary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, Api, cis, eventually, live, runtime_config, service
from support.redis_nodes import (
    MASTER_NAME,
    ClusterProcesses,
    SentinelProcesses,
    command,
    info,
)

pytest_plugins = ("support.kube.fixtures", "support.redis_topology")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def quick_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """Figures every half second: the first pass runs before the service exists, and the next
    one would otherwise come after the default 30 s."""
    monkeypatch.setenv("CACHEFLEET_OPERATOR_CACHE_INTERVAL", "0.5")
    # The operator dials tenant-named Redis hosts only where its settings allow it.
    monkeypatch.setenv("CACHEFLEET_OPERATOR_EXTERNAL_REDIS_HOSTS", "127.0.0.1,localhost")


def figures(cluster: Cluster, name: str) -> Any:
    return ((cis(cluster, name) or {}).get("status") or {}).get("cache")


async def test_an_external_cluster_reaches_the_pods_and_its_primaries_sum_into_the_status(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    redis_cluster: ClusterProcesses,
) -> None:
    import redis.cluster

    client = redis.cluster.RedisCluster.from_url(redis_cluster.url)
    for index in range(30):
        client.get(f"missing-{index}")  # 30 misses, spread over the primaries
    client.close()
    shares = [int(info(port, "stats")["keyspace_misses"]) for port in redis_cluster.primary_ports()]
    assert sum(shares) == 30
    assert max(shares) < 30
    await start_operator()
    external = {"mode": "cluster", "url": redis_cluster.url}
    await api.send("POST", CIS_PATH, service("svc", cache={"redis": {"external": external}}))
    config = await eventually(lambda: runtime_config(cluster, "svc"), "ConfigMap")
    settings = yaml.safe_load(config["data"]["config.yaml"])
    assert settings["redis"]["mode"] == "cluster"
    assert live(cluster, "apps/v1/statefulsets", "svc-redis") is None
    status = await eventually(lambda: figures(cluster, "svc"), "cache figures")
    assert status["keyspaceMisses"] == 30  # summed over the primaries


async def test_an_external_sentinel_reaches_the_pods_and_its_primary_fills_the_status(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    redis_sentinel: SentinelProcesses,
) -> None:
    primary = redis_sentinel.primary_port()
    for _ in range(5):
        command(primary, "GET", "nothing-here")
    await start_operator()
    external = {"mode": "sentinel", "url": redis_sentinel.url, "sentinelMaster": MASTER_NAME}
    await api.send("POST", CIS_PATH, service("svc", cache={"redis": {"external": external}}))
    config = await eventually(lambda: runtime_config(cluster, "svc"), "ConfigMap")
    settings = yaml.safe_load(config["data"]["config.yaml"])
    assert (settings["redis"]["mode"], settings["redis"]["sentinel_master"]) == (
        "sentinel",
        MASTER_NAME,
    )
    status = await eventually(lambda: figures(cluster, "svc"), "cache figures")
    assert status["keyspaceMisses"] >= 5
    assert status["usedMemoryBytes"] > 0
