"""What a load generator is asked to do and what it reports, whichever generator runs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cachefleet.bench.bodies import RequestSet


@dataclass(frozen=True)
class LoadSpec:
    """One timed load: ``connections`` keep-alive connections posting for ``duration_s``."""

    base_url: str
    requests: RequestSet
    connections: int
    duration_s: float
    hit_ratio: float
    nonce: int
    #: CPUs the generator is pinned to (``taskset -c``), or None to let it float.
    cpus: str | None = None

    @property
    def miss_per_10000(self) -> int:
        """Misses per 10,000 requests, an integer so that every sender counts exactly."""
        return round((1.0 - self.hit_ratio) * 10_000)


@dataclass(frozen=True)
class LoadResult:
    """What the client saw. Latencies in milliseconds; errors are non-2xx plus socket errors."""

    requests: int
    duration_s: float
    errors: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    generator: str
    #: perf_analyzer's server-side section as it printed it (the server's statistics extension
    #: read by a Triton tool), when perf_analyzer generated the load; empty otherwise.
    server_report: str = ""

    @property
    def throughput(self) -> float:
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0


def is_miss(index: int, miss_per_10000: int) -> bool:
    """Whether request ``index`` (1-based) of a sender is a miss: exact, evenly spread."""
    return index * miss_per_10000 // 10_000 > (index - 1) * miss_per_10000 // 10_000


def bodies(spec: LoadSpec, sender: int) -> Iterator[bytes]:
    """The bodies one sender sends, in order: misses unique to this run and sender, evenly spread
    at the asked ratio, and hits cycling through the prebuilt hit bodies."""
    requests = spec.requests
    hits = misses = index = 0
    while True:
        index += 1
        if is_miss(index, spec.miss_per_10000):
            misses += 1
            yield requests.miss_body(spec.nonce, sender, misses)
        else:
            hits += 1
            yield requests.hit_bodies[hits % len(requests.hit_bodies)]
