"""The cluster variant's fault schedule: a primary killed (its replica takes over) and started
again, a manual ``CLUSTER FAILOVER``, a primary paused, a primary full.

Each fault hits one shard; the other shards keep serving. "Hits resume" is measured per fault
from the moment it struck to the first Redis hit on a key of the struck shard's slots, so it
says how long that shard's keys were misses, not how soon any hit came back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from cachefleet.bench.redis_topology import ClusterProcesses, command
from harness.chaos.control import STEADY, ChaosOptions, Log
from harness.chaos.faults import FaultLog, run_schedule


def slot_ranges(cluster: ClusterProcesses, port: int) -> list[tuple[int, int]]:
    """The slot ranges the primary on ``port`` serves now."""
    for node in cluster.nodes:
        if not node.alive:
            continue
        try:
            entries = command(node.port, "CLUSTER", "SLOTS")
        except Exception:  # any failure: ask the next node
            continue
        return [(int(e[0]), int(e[1])) for e in entries if int(e[2][1]) == port]
    return []


class ClusterConductor:
    """Runs the cluster fault schedule; ``stop`` also ends the planter."""

    def __init__(self, cluster: ClusterProcesses, options: ChaosOptions, log: Log) -> None:
        self.cluster = cluster
        self.options = options
        self.log = log
        self.faults = FaultLog()
        self.stop = threading.Event()
        self._killed: int | None = None
        self._paused_or_full: int | None = None
        self._turn = 0

    def schedule(self, stop_at: float) -> None:
        """One cycle: kill a primary at 10%, start it again at 35%, manual failover at 55%,
        pause a primary at 70%, fill one at 85%, give it room at 95%."""
        cycle = self.options.cycle_s
        steps: list[tuple[float, Callable[[], None]]] = [
            (0.10, self._kill), (0.35, self._restart), (0.55, self._failover),
            (0.70, self._pause), (0.85, self._fill), (0.95, self._unfill),
        ]  # fmt: skip
        run_schedule(steps, cycle, stop_at, self.stop)

    def _primary_with_replica(self) -> int | None:
        primaries = self.cluster.primary_ports()
        self._turn += 1
        for offset in range(len(primaries)):
            port = primaries[(self._turn + offset) % len(primaries)]
            if self.cluster.replica_of(port) is not None:
                return port
        return None

    def _watch(self, slots: list[tuple[int, int]], what: str) -> None:
        """Measure hits on ``slots`` from now (called once the fault has struck)."""
        self.faults.back_at.append(time.time())
        self.faults.resume_slots.append(slots)
        self.faults.resume_after.append(what)

    def _kill(self) -> None:
        port = self._primary_with_replica()
        if port is None:
            self.log("chaos: no primary with a replica to kill")
            return
        slots = slot_ranges(self.cluster, port)
        self.cluster.node(port).kill()
        self._watch(slots, "kill")
        self._killed = port
        self.faults.note("primary down", "a primary killed with SIGKILL; its replica takes over")
        self.log(f"chaos: primary {port} killed")

    def _restart(self) -> None:
        if self._killed is None:
            return
        self.cluster.node(self._killed).start()
        self.faults.note("after restart", "the killed primary back, as a replica")
        self.log(f"chaos: node {self._killed} started again")
        self._killed = None

    def _failover(self) -> None:
        port = self._primary_with_replica()
        replica = self.cluster.replica_of(port) if port is not None else None
        if port is None or replica is None:
            self.log("chaos: no replica for a manual failover")
            return
        slots = slot_ranges(self.cluster, port)
        try:
            command(port, "WAIT", "1", "1000", timeout_s=3)
            command(replica, "CLUSTER", "FAILOVER", timeout_s=3)
        except Exception as error:  # a replica still syncing refuses: the run goes on
            self.log(f"chaos: CLUSTER FAILOVER refused: {error}")
            return
        self._watch(slots, "manual failover")
        self.faults.note("manual failover", "CLUSTER FAILOVER on a replica")
        self.log(f"chaos: replica {replica} took over from {port}")

    def _pause(self) -> None:
        primaries = self.cluster.primary_ports()
        if not primaries:
            return
        port = primaries[self._turn % len(primaries)]
        try:
            command(port, "CLIENT", "PAUSE", str(self.options.pause_ms), "ALL")
        except Exception as error:
            self.log(f"chaos: pause failed: {error}")
            return
        self.faults.note("primary paused", f"CLIENT PAUSE {self.options.pause_ms} ALL")
        self.faults.note(STEADY, "pause over", time.time() + self.options.pause_ms / 1000)
        self.log(f"chaos: primary {port} paused")

    def _fill(self) -> None:
        primaries = self.cluster.primary_ports()
        if not primaries:
            return
        port = primaries[(self._turn + 1) % len(primaries)]
        try:
            used = int(_info(port, "memory")["used_memory"])
            command(port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
            command(port, "CONFIG", "SET", "maxmemory", str(used))
        except Exception as error:
            self.log(f"chaos: fill failed: {error}")
            return
        self._paused_or_full = port
        self.faults.note("primary full", "maxmemory at its use, noeviction")
        self.log(f"chaos: primary {port} full")

    def _unfill(self) -> None:
        if self._paused_or_full is None:
            return
        try:
            command(self._paused_or_full, "CONFIG", "SET", "maxmemory", "0")
        except Exception as error:
            self.log(f"chaos: unfill failed: {error}")
        self._paused_or_full = None
        self.faults.note(STEADY, "maxmemory lifted")
        self.log("chaos: the full primary has room again")


def _info(port: int, section: str) -> dict[str, Any]:
    reply = command(port, "INFO", section)
    return dict(reply) if isinstance(reply, dict) else {}
