"""What a chaos run is given: its options, and the Redis (a ``RedisServer``, which it may kill
and start again on the same port) whose faults it may cause.

Shared by the conductor, the planter, the run and the report, so it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cachefleet.bench.processes import RedisServer

STEADY = "steady"
Log = Callable[[str], None]


@dataclass(frozen=True)
class ChaosOptions:
    """How long and how hard; the fault schedule repeats every ``cycle_s`` seconds."""

    duration_s: float = 20.0
    clients: int = 3
    cycle_s: float = 20.0
    pause_ms: int = 1500
    request_timeout_s: float = 20.0
    #: Seconds each client waits after each request: 0 sends as fast as the servers answer (the
    #: harness's load); a test paces its clients, so that the faults and the checks, not the
    #: load, take its share of the machine.
    pace_s: float = 0.0


def connect(redis: RedisServer) -> Any:
    """A redis-py client for ``redis`` (imported late: only the conductor's side needs it)."""
    import redis as redis_py

    return redis_py.Redis(host="127.0.0.1", port=redis.port, socket_timeout=5)
