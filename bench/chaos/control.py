"""What a chaos run is given: its options, and the Redis whose faults it may cause.

Shared by the conductor, the planter, the run and the report, so it imports none of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

STEADY = "steady"
Log = Callable[[str], None]


class RedisControl(Protocol):
    """A redis-server the conductor may kill and start again on the same port."""

    port: int

    def kill(self) -> None: ...

    def start(self) -> None: ...


@dataclass(frozen=True)
class ChaosOptions:
    """How long and how hard; the fault schedule repeats every ``cycle_s`` seconds."""

    duration_s: float = 20.0
    clients: int = 3
    cycle_s: float = 20.0
    pause_ms: int = 1500
    request_timeout_s: float = 20.0


def connect(redis: RedisControl) -> Any:
    """A redis-py client for ``redis`` (imported late: only the conductor's side needs it)."""
    import redis as redis_py

    return redis_py.Redis(host="127.0.0.1", port=redis.port, socket_timeout=5)
