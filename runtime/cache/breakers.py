"""One circuit breaker per Redis shard, so one dead primary of a cluster stops only its keys.

A Redis Cluster spreads keys over primaries by slot. If the whole tier shared one breaker, a
single dead primary would open it for every key, and hits from the healthy shards would stop
with it. Here each shard (named by the node that serves it, as the cluster client's slot table
says) has its own breaker: a request whose key lives on a dead shard is a miss at once while its
breaker is open; the others keep hitting. A failover moves the slots to another node, whose
breaker starts closed, so hits resume as soon as the client has learnt the new topology.
Standalone and sentinel modes have one shard. The ``cachefleet_redis_circuit_open`` gauge is 1
while any shard's breaker is not closed.
"""

from __future__ import annotations

from collections.abc import Callable

from cachefleet.runtime.cache.breaker import BreakerState, CircuitBreaker


class ShardBreakers:
    """Breakers made on first use per shard name, all with the same settings."""

    def __init__(
        self,
        failure_threshold: int,
        reset_s: float,
        on_any_open: Callable[[bool], None] = lambda is_open: None,
    ) -> None:
        self.failure_threshold = failure_threshold
        self.reset_s = reset_s
        self._on_any_open = on_any_open
        self._breakers: dict[str, CircuitBreaker] = {}
        self._not_closed: set[str] = set()

    def of(self, shard: str) -> CircuitBreaker:
        breaker = self._breakers.get(shard)
        if breaker is None:
            breaker = CircuitBreaker(
                f"redis {shard}" if shard != "redis" else "redis",
                self.failure_threshold,
                self.reset_s,
                on_change=lambda state: self._changed(shard, state),
            )
            self._breakers[shard] = breaker
        return breaker

    @property
    def open_shards(self) -> list[str]:
        """Shards whose breaker is open or half-open."""
        return sorted(self._not_closed)

    def _changed(self, shard: str, state: BreakerState) -> None:
        if state is BreakerState.CLOSED:
            self._not_closed.discard(shard)
        else:
            self._not_closed.add(shard)
        self._on_any_open(bool(self._not_closed))
