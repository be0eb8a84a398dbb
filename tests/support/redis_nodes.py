"""Redis past one node for the tests: the cluster as ``cachefleet bench`` starts it, and a
Sentinel-watched primary with a replica (tests only), built from the same nodes.

- :class:`ClusterProcesses` (from :mod:`cachefleet.bench.redis_topology`): three primaries,
  optionally a replica each, every port below 55535 (the cluster bus listens on port + 10000).
- :class:`SentinelProcesses`: a primary, a replica of it and one ``redis-server --sentinel``
  watching them under :data:`MASTER_NAME` (quorum 1), with the short timeouts of the cluster's
  nodes, so a failover takes a second or two.

Everything runs in a folder the caller owns; ``stop`` ends every process started here (by its own
handle, never by name).
"""

from __future__ import annotations

from pathlib import Path

from cachefleet.bench.redis_topology import (
    NODE_TIMEOUT_MS,
    ClusterProcesses,
    RedisNode,
    command,
    free_port,
    info,
    wait_until,
)

__all__ = ["MASTER_NAME", "ClusterProcesses", "SentinelProcesses", "command", "info"]

MASTER_NAME = "cachefleet"


class SentinelProcesses:
    """A primary, one replica of it, and a Sentinel that watches them as :data:`MASTER_NAME`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.primary = RedisNode(free_port(), workdir, [])
        self.replica = RedisNode(free_port(), workdir, [])
        self.sentinel: RedisNode | None = None

    def start(self) -> None:
        self.primary.start()
        self.replica.args = ["--replicaof", "127.0.0.1", str(self.primary.port)]
        self.replica.start()
        port = free_port()
        config = self.workdir / f"sentinel-{port}.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {self.workdir}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {NODE_TIMEOUT_MS}\n"
            f"sentinel failover-timeout {MASTER_NAME} 5000\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        self.sentinel = RedisNode(port, self.workdir, [str(config)], sentinel=True)
        self.sentinel.start()
        wait_until(self._replica_known, 30, "Sentinel to see a synced replica")

    @property
    def url(self) -> str:
        """The Sentinel's URL, as ``--redis-url`` takes it in sentinel mode."""
        assert self.sentinel is not None
        return f"redis://127.0.0.1:{self.sentinel.port}/0"

    def primary_port(self) -> int:
        assert self.sentinel is not None
        _, port = command(self.sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        return int(port)

    def _replica_known(self) -> bool:
        assert self.sentinel is not None
        try:
            replicas = command(self.sentinel.port, "SENTINEL", "REPLICAS", MASTER_NAME)
            replication = info(self.primary_port(), "replication")
        except Exception:
            return False
        usable = [
            r for r in replicas
            if "s_down" not in str(r) and "disconnected" not in str(r)
        ]  # fmt: skip
        online = isinstance(replication.get("slave0"), dict) and (
            replication["slave0"].get("state") == "online"
        )
        return bool(usable) and online

    def failover(self, timeout_s: float = 30) -> int:
        """``SENTINEL FAILOVER``; waits until the replica is primary and returns its port."""
        assert self.sentinel is not None
        before = self.primary_port()
        command(self.sentinel.port, "SENTINEL", "FAILOVER", MASTER_NAME)
        wait_until(lambda: self._promoted(before), timeout_s, "the failover to finish")
        return self.primary_port()

    def _promoted(self, before: int) -> bool:
        """The replica is primary, and Sentinel's failover is over (``SENTINEL MASTERS``, which
        clients read, names the new primary only once it is)."""
        assert self.sentinel is not None
        try:
            now = self.primary_port()
            state = command(self.sentinel.port, "SENTINEL", "MASTER", MASTER_NAME)
        except Exception:
            return False
        settled = (
            isinstance(state, dict)
            and int(state.get("port", 0)) == now
            and "failover" not in str(state.get("flags", ""))
        )
        return settled and now != before and info(now, "replication").get("role") == "master"

    def wait_replica_synced(self, timeout_s: float = 30) -> None:
        wait_until(self._replica_known, timeout_s, "the demoted primary to sync as a replica")

    def stop(self) -> None:
        for node in (self.sentinel, self.replica, self.primary):
            if node is not None:
                node.stop()
