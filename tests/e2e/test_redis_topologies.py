"""Servers over Redis past one node, under load from client threads, every answer checked against
numpy: a Redis Cluster with a primary killed, and Sentinel with a failover. No request fails."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest
from support import loopback
from support.processes import CACHEFLEET, ServerProcess
from support.redis_nodes import MASTER_NAME, ClusterProcesses, SentinelProcesses, info
from support.redis_topology import LoadLoop

from harness.chaos.answers import redis_key, served_fingerprint

pytest_plugins = ("support.redis_topology",)
MakeServer = Callable[..., ServerProcess]
SEEDS = list(range(60))


pytestmark = pytest.mark.slow


def cluster_servers(make_server: MakeServer, cluster: ClusterProcesses) -> list[ServerProcess]:
    return [
        make_server("--cache", "redis", "--cache-all-models", "--redis-mode", "cluster",
                    "--redis-url", cluster.url, "--redis-socket-timeout", "0.5")
        for _ in range(2)
    ]  # fmt: skip


def test_two_servers_share_a_cluster_and_flush_empties_every_primary(
    make_server: MakeServer, redis_cluster: ClusterProcesses
) -> None:
    servers = cluster_servers(make_server, redis_cluster)
    with LoadLoop([s.base_url for s in servers], SEEDS, threads=2) as load:
        load.wait_for(4 * len(SEEDS))
    assert not load.failed, load.errors[:5]
    assert any(a.cache == "hit-redis" for a in load.answers)
    held = redis_cluster.keys_per_node("cachefleet:v2:default:simple:*")
    assert sum(held.values()) == len(SEEDS)
    assert len([count for count in held.values() if count]) >= 2, held

    flushed = loopback.post(f"{servers[0].base_url}/v2/models/simple/cache/flush", timeout=30)
    assert flushed.status_code == 200, flushed.text
    assert flushed.json()["removed"] == len(SEEDS)
    assert redis_cluster.keys_per_node("cachefleet:v2:default:simple:*") == dict.fromkeys(held, 0)

    # And from the command line, with no server: the same flush of every primary.
    with LoadLoop([s.base_url for s in servers], SEEDS, threads=2) as load:
        load.wait_for(2 * len(SEEDS))
    assert sum(redis_cluster.keys_per_node("cachefleet:v2:default:simple:*").values()) == len(SEEDS)
    done = subprocess.run(
        [*CACHEFLEET, "flush", "--model", "simple", "--redis-mode", "cluster",
         "--redis-url", redis_cluster.url],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"removed {len(SEEDS)} entries" in done.stdout
    assert redis_cluster.keys_per_node("cachefleet:v2:default:simple:*") == dict.fromkeys(held, 0)


def test_a_primary_killed_under_load_fails_nothing_and_the_other_shards_keep_hitting(
    make_server: MakeServer, redis_cluster: ClusterProcesses
) -> None:
    servers = cluster_servers(make_server, redis_cluster)
    fingerprint = served_fingerprint(servers[0].base_url)
    home = {seed: redis_cluster.port_of(redis_key(seed, fingerprint)) for seed in SEEDS}
    dead = home[0]
    with LoadLoop([s.base_url for s in servers], SEEDS) as load:
        load.wait_for(3 * len(SEEDS))
        killed_at = time.monotonic()
        redis_cluster.node(dead).kill()
        load.wait_for_after(killed_at + 0.5, 6 * len(SEEDS))
    assert not load.failed, load.errors[:5]
    after = load.between(killed_at + 0.5)  # answers to requests sent once the kill had landed
    for port in set(home.values()) - {dead}:
        hits = [a for a in after if home[a.seed] == port and a.cache == "hit-redis"]
        assert hits, f"no Redis hits from the live primary on port {port} after the kill"
    on_dead = [a for a in after if home[a.seed] == dead]
    assert on_dead
    assert {a.cache for a in on_dead} == {"miss"}
    metrics = loopback.get(f"{servers[0].base_url}/metrics", timeout=10).text
    assert "cachefleet_redis_circuit_open 1.0" in metrics


def test_two_servers_share_a_sentinel_primary_and_follow_a_failover_under_load(
    make_server: MakeServer, redis_sentinel: SentinelProcesses
) -> None:
    servers = [
        make_server("--cache", "redis", "--cache-all-models", "--redis-mode", "sentinel",
                    "--redis-url", redis_sentinel.url, "--redis-sentinel-master", MASTER_NAME,
                    "--redis-socket-timeout", "0.5")
        for _ in range(2)
    ]  # fmt: skip
    with LoadLoop([s.base_url for s in servers], SEEDS) as load:
        load.wait_for(3 * len(SEEDS))
        assert any(a.cache == "hit-redis" for a in load.answers)
        new = redis_sentinel.failover()
        promoted_at = time.monotonic()
        hits_before = int(info(new, "stats")["keyspace_hits"])
        load.wait_for_after(promoted_at + 1.0, 4 * len(SEEDS))
    assert not load.failed, load.errors[:5]
    resumed = [a for a in load.between(promoted_at) if a.cache == "hit-redis"]
    assert resumed, "no Redis hits after the failover"
    # The hits came from the promoted replica, not only from the demoted primary.
    assert int(info(new, "stats")["keyspace_hits"]) > hits_before
