"""The fleet figure: a skewed workload spread over several servers, and what each fleet did.

The workload is Zipf over ``distinct`` inputs of ``simple`` (rank k drawn with weight
1/k^exponent), more than one replica's local cache holds, and it is fixed: each server gets its
own ``draws`` (a seed per server, so no two servers send the same sequence in lockstep), sent
once each, in order, shared among its connections; every fleet gets the same requests, so what
the fleets computed compares directly. The senders are the harness's Python senders
(:func:`cachefleet.bench.pyload.send_bodies`): wrk runs for a duration, not a number of
requests. What each fleet did comes from the servers' own counters: requests computed and
executions from Triton's statistics (``inference_count``, ``execution_count``: Triton's
dynamic batcher may run several requests in one execution), hits and misses from each server's
metrics, and CPU from every process that served.
"""

from __future__ import annotations

import dataclasses
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import orjson

from cachefleet.bench import pyload, server_metrics
from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.measure import settle
from cachefleet.bench.processes import cpu_seconds
from cachefleet.bench.pyload import SenderReport

MODEL = "simple"


@dataclass(frozen=True)
class Workload:
    """The skewed workload: how many distinct inputs, how skewed, how long each sequence is."""

    distinct: int = 4000
    exponent: float = 1.0
    #: Requests per server, each drawn once.
    draws: int = 15_000

    def ranks(self, seed: int) -> np.ndarray:
        """``draws`` input indexes drawn by Zipf's law, the same for the same seed."""
        weights = 1.0 / np.arange(1, self.distinct + 1, dtype=np.float64) ** self.exponent
        rng = np.random.default_rng(seed)
        return rng.choice(self.distinct, size=self.draws, p=weights / weights.sum())

    def request_sets(self, inputs: RequestSet, servers: int) -> list[RequestSet]:
        """One request set per server: ``inputs``' hit bodies (``distinct`` of them) in the
        order of that server's draws."""
        if len(inputs.hit_bodies) != self.distinct:
            raise BenchError(f"the workload needs {self.distinct} distinct bodies")
        return [
            dataclasses.replace(
                inputs, hit_bodies=tuple(inputs.hit_bodies[i] for i in self.ranks(seed))
            )
            for seed in range(servers)
        ]

    def distinct_drawn(self, servers: int) -> int:
        """Distinct inputs among every server's draws."""
        return len(set().union(*(set(self.ranks(seed).tolist()) for seed in range(servers))))


def send_draws(spec: LoadSpec, sender: int, start_at: float) -> SenderReport:
    """Connection ``sender``'s share of its server's draws: every ``connections``-th one."""
    share = spec.requests.hit_bodies[sender :: spec.connections]
    return pyload.send_bodies(spec, share, start_at)


def fixed_load(spec: LoadSpec) -> LoadResult:
    """``spec``'s draws sent once by Python senders in processes (``spec.duration_s``: the
    longest it may take)."""
    return pyload.run_senders(spec, send_draws, "python")


@dataclass(frozen=True)
class Counters:
    """What a fleet's servers counted, summed: the requests the upstream computed and its
    executions, cache hits by tier, misses, and the CPU of every process that served."""

    computed: float
    executions: float
    hits_by_tier: dict[str, float]
    misses: float
    cpu_s: float

    def minus(self, before: Counters) -> Counters:
        tiers = set(self.hits_by_tier) | set(before.hits_by_tier)
        return Counters(
            self.computed - before.computed,
            self.executions - before.executions,
            {t: self.hits_by_tier.get(t, 0.0) - before.hits_by_tier.get(t, 0.0) for t in tiers},
            self.misses - before.misses,
            self.cpu_s - before.cpu_s,
        )

    @property
    def hit_ratio(self) -> float | None:
        hits = sum(self.hits_by_tier.values())
        return hits / (hits + self.misses) if hits + self.misses > 0 else None


@dataclass(frozen=True)
class Fleet:
    """Where a fleet answers and what it counts: the servers the load goes to, the metrics
    pages of its caches, the statistics of the servers that execute, every pid that serves."""

    name: str
    base_urls: tuple[str, ...]
    metrics_urls: tuple[str, ...]
    executing_urls: tuple[str, ...]
    pids: tuple[int, ...]

    def counters(self) -> Counters:
        hits: dict[str, float] = {}
        misses = 0.0
        for url in self.metrics_urls:
            read = server_metrics.read(url, MODEL)
            for tier, count in read.hits_by_tier.items():
                hits[tier] = hits.get(tier, 0.0) + count
            if read.coalesced:
                hits["coalesced"] = hits.get("coalesced", 0.0) + read.coalesced
            misses += read.misses
        computed = executions = 0.0
        for url in self.executing_urls:
            inferences, runs = statistics(url, MODEL)
            computed, executions = computed + inferences, executions + runs
        cpu_s = sum(cpu_seconds(pid) for pid in self.pids)
        return Counters(computed, executions, hits, misses, cpu_s)


def statistics(base_url: str, model: str) -> tuple[float, float]:
    """The model's requests computed and executions so far, from Triton's statistics
    extension (neither counts the requests its cache answered)."""
    url = f"{base_url}/v2/models/{model}/stats"
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            document = orjson.loads(response.read())
    except (urllib.error.URLError, OSError) as error:
        raise BenchError(f"GET {url} failed: {error}") from None
    entries = document["model_stats"]
    return (
        float(sum(entry["inference_count"] for entry in entries)),
        float(sum(entry["execution_count"] for entry in entries)),
    )


@dataclass(frozen=True)
class FleetResult:
    """One fleet under the workload: the generators' figures and the servers' counters."""

    fleet: str
    loads: tuple[LoadResult, ...]
    counters: Counters
    distinct: int
    #: Whether every draw was sent (False: the longest allowed time ran out first).
    complete: bool

    @property
    def requests(self) -> int:
        return sum(load.requests for load in self.loads)

    @property
    def throughput(self) -> float:
        longest = max(load.duration_s for load in self.loads)
        return self.requests / longest if longest > 0 else 0.0

    @property
    def p99_ms(self) -> float:
        """The worst server's p99: an upper bound on the p99 of all requests together."""
        return max(load.p99_ms for load in self.loads)

    @property
    def errors(self) -> int:
        return sum(load.errors for load in self.loads)

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.counters.cpu_s / self.requests if self.requests else 0.0


def run(
    fleet: Fleet,
    workload: Workload,
    sets: Sequence[RequestSet],
    spec: Callable[[str, RequestSet], LoadSpec],
    run_load: Callable[[LoadSpec], LoadResult] = fixed_load,
) -> FleetResult:
    """Load every server of ``fleet`` at once, each with its own draws, and read what the
    fleet counted over the load (cold caches: every first request of an input is a miss)."""
    before = fleet.counters()
    gate = threading.Barrier(len(fleet.base_urls))

    def one(base_url: str, requests: RequestSet) -> LoadResult:
        gate.wait()
        return run_load(spec(base_url, requests))

    with ThreadPoolExecutor(len(fleet.base_urls)) as pool:
        loads = tuple(pool.map(one, fleet.base_urls, sets))
    settle(*fleet.pids)  # write-behind inserts and statistics land after the last answer
    counters = fleet.counters().minus(before)
    return FleetResult(
        fleet.name, loads, counters, workload.distinct_drawn(len(sets)),
        complete=all(load.requests >= workload.draws for load in loads),
    )  # fmt: skip
