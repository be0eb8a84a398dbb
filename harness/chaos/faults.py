"""The conductor's fault schedule: kill and restart Redis, pause it, fill it.

Every fault is logged with its wall-clock time so the report can place slow requests and
Redis-hit resumption against the phase in force when they happened.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from cachefleet.bench.processes import RedisServer
from harness.chaos.control import STEADY, ChaosOptions, Log, connect


@dataclass
class FaultLog:
    """Wall-clock times of what the conductor did; ``back_at`` is when a restart answered."""

    #: (wall-clock time, phase that starts then, what was done)
    events: list[tuple[float, str, str]] = field(default_factory=list)
    back_at: list[float] = field(default_factory=list)
    #: Per ``back_at`` entry, the slot ranges whose hits count as resumed (cluster runs);
    #: empty when any Redis hit counts.
    resume_slots: list[list[tuple[int, int]]] = field(default_factory=list)
    #: Per ``back_at`` entry, what struck (cluster runs report kills and failovers apart).
    resume_after: list[str] = field(default_factory=list)
    planted: int = 0

    def note(self, phase: str, what: str, at: float | None = None) -> None:
        self.events.append((time.time() if at is None else at, phase, what))

    def phase_at(self, moment: float) -> str:
        """The phase in force at ``moment`` (``steady`` before the first fault)."""
        events = sorted(self.events)
        index = bisect.bisect_right([t for t, _, _ in events], moment)
        return events[index - 1][1] if index else STEADY


def run_schedule(
    steps: Sequence[tuple[float, Callable[[], None]]],
    cycle_s: float,
    stop_at: float,
    stop: threading.Event,
) -> None:
    """Run ``steps`` (fraction of a cycle, action) cycle after cycle until ``stop_at`` (no step
    in its last half second) or until ``stop`` is set."""
    start = time.time()
    index = 0
    while True:
        at_cycle, action = steps[index % len(steps)]
        when = start + (index // len(steps)) * cycle_s + at_cycle * cycle_s
        if when >= stop_at - 0.5:
            return
        stop.wait(max(0.0, when - time.time()))
        if stop.is_set():
            return
        action()
        index += 1


class Conductor:
    """Runs the fault schedule against ``redis``; ``stop`` also ends the planter."""

    def __init__(self, redis: RedisServer, options: ChaosOptions, log: Log) -> None:
        self.redis = redis
        self.options = options
        self.log = log
        self.faults = FaultLog()
        self.stop = threading.Event()

    def schedule(self, stop_at: float) -> None:
        """One cycle: kill at 15%, restart at 25%, pause at 45%, fill at 60%, unfill at 75%."""
        cycle = self.options.cycle_s
        steps: list[tuple[float, Callable[[], None]]] = [
            (0.15, self._kill), (0.25, self._restart), (0.45, self._pause),
            (0.60, self._fill), (0.75, self._unfill),
        ]  # fmt: skip
        run_schedule(steps, cycle, stop_at, self.stop)

    def _kill(self) -> None:
        self.redis.kill()
        self.faults.note("redis down", "killed with SIGKILL")
        self.log("chaos: redis killed")

    def _restart(self) -> None:
        self.redis.start()
        self.faults.back_at.append(time.time())
        self.faults.note("after restart", "started again on the same port")
        self.log("chaos: redis restarted")

    def _pause(self) -> None:
        connect(self.redis).execute_command("CLIENT", "PAUSE", str(self.options.pause_ms), "ALL")
        self.faults.note("redis paused", f"CLIENT PAUSE {self.options.pause_ms} ALL")
        self.faults.note(STEADY, "pause over", time.time() + self.options.pause_ms / 1000)
        self.log("chaos: redis paused")

    def _fill(self) -> None:
        client = connect(self.redis)
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(used))
        self.faults.note("redis full", "maxmemory at its use, noeviction")
        self.log("chaos: redis full")

    def _unfill(self) -> None:
        connect(self.redis).config_set("maxmemory", "0")
        self.faults.note(STEADY, "maxmemory lifted")
        self.log("chaos: redis has room again")
