"""One chaos run: client processes, the fault schedule and the planter, then the figures.

The same :func:`run_chaos` drives the reliability test (short) and ``bash scripts/harness chaos``;
:func:`run_cluster_chaos` is its Redis Cluster variant (``--redis-mode cluster``).
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from typing import Any

from cachefleet.bench import server_metrics
from cachefleet.bench.processes import RedisServer
from cachefleet.bench.redis_topology import ClusterProcesses
from harness.chaos.answers import MODEL, redis_key, served_fingerprint
from harness.chaos.clients import ClientResult, client_main
from harness.chaos.cluster_faults import ClusterConductor
from harness.chaos.control import ChaosOptions, Log
from harness.chaos.faults import Conductor, FaultLog
from harness.chaos.planted import Planter
from harness.chaos.report import ChaosReport


def run_chaos(
    urls: list[str], redis: RedisServer, options: ChaosOptions, log: Log = print
) -> ChaosReport:
    """Load every server in ``urls`` from client processes while ``redis`` misbehaves."""
    conductor = Conductor(redis, options, log)
    planting = Planter(redis, conductor.faults, conductor.stop, served_fingerprint(urls[0]))
    return _run(urls, conductor, planting, options, "standalone")


def run_cluster_chaos(
    urls: list[str], cluster: ClusterProcesses, options: ChaosOptions, log: Log = print
) -> ChaosReport:
    """The cluster variant: the servers share ``cluster`` while its shards misbehave."""
    from redis.cluster import RedisCluster

    conductor = ClusterConductor(cluster, options, log)

    def connect_cluster() -> Any:
        return RedisCluster.from_url(cluster.url, socket_timeout=5, require_full_coverage=False)

    fingerprint = served_fingerprint(urls[0])
    planting = Planter(
        None, conductor.faults, conductor.stop, fingerprint, connect_to=connect_cluster
    )
    return _run(urls, conductor, planting, options, "cluster")


def _run(
    urls: list[str],
    conductor: Conductor | ClusterConductor,
    planting: Planter,
    options: ChaosOptions,
    topology: str,
) -> ChaosReport:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    started = time.time()
    stop_at = started + options.duration_s + 2.0  # spawned clients take a moment to start
    clients = [
        context.Process(
            target=client_main,
            args=(index, urls, stop_at, options.request_timeout_s, options.pace_s, results),
            daemon=True,
        )
        for index in range(options.clients)
    ]
    for client in clients:
        client.start()
    planter = threading.Thread(target=planting.plant_forever, daemon=True)
    planter.start()
    try:
        conductor.schedule(stop_at)
        gathered = _gather(results, clients, stop_at + options.request_timeout_s + 30)
    finally:
        conductor.stop.set()
        planter.join(10)
        for client in clients:
            if client.is_alive():
                client.kill()
    elapsed_s = time.time() - started
    report = _report(gathered, conductor.faults, urls, options, elapsed_s, planting.fingerprint)
    report.topology = topology
    return report


def _gather(results: Any, clients: list[Any], deadline: float) -> list[ClientResult]:
    gathered: list[ClientResult] = []
    while len(gathered) < len(clients):
        try:
            gathered.append(results.get(timeout=max(0.1, deadline - time.time()))[1])
        except queue.Empty:
            raise RuntimeError(f"only {len(gathered)} of {len(clients)} clients reported") from None
    for client in clients:
        client.join(10)
    return gathered


def _report(
    results: list[ClientResult],
    faults: FaultLog,
    urls: list[str],
    options: ChaosOptions,
    elapsed_s: float,
    fingerprint: str,
) -> ChaosReport:
    latencies = sorted(x for r in results for x in r.latencies_s)
    hits = sorted(x for r in results for x in r.hit_redis_at)
    seeded_hits = [h for r in results for h in zip(r.hit_redis_at, r.hit_redis_seeds, strict=True)]
    statuses: dict[str, int] = {}
    for result in results:
        for status, count in result.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return ChaosReport(
        duration_s=elapsed_s,
        clients=options.clients,
        servers=len(urls),
        sent=sum(r.sent for r in results),
        failed=sum(r.failed for r in results),
        wrong=sum(r.wrong for r in results),
        max_latency_s=latencies[-1] if latencies else 0.0,
        p99_latency_s=latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0.0,
        stalls_s=_stalls(results, faults),
        statuses=statuses,
        resume_s=[
            _first_hit_on(seeded_hits, back, slots, fingerprint)
            if slots
            else _first_after(hits, back)
            for back, slots in zip(faults.back_at, _padded(faults), strict=True)
        ],
        cache_errors=_error_counts(urls),
        faults=faults,
        examples=[example for r in results for example in r.examples][:10],
    )


def _stalls(results: list[ClientResult], faults: FaultLog) -> dict[str, float]:
    stalls: dict[str, float] = {}
    for started, elapsed in (slow for r in results for slow in r.slow):
        phase = faults.phase_at(started)
        stalls[phase] = max(stalls.get(phase, 0.0), elapsed)
    return stalls


def _first_after(times: list[float], moment: float) -> float | None:
    later = [t - moment for t in times if t >= moment]
    return min(later) if later else None


def _padded(faults: FaultLog) -> list[list[tuple[int, int]]]:
    return faults.resume_slots + [[]] * (len(faults.back_at) - len(faults.resume_slots))


def _first_hit_on(
    hits: list[tuple[float, int]], moment: float, slots: list[tuple[int, int]], fingerprint: str
) -> float | None:
    """Seconds from ``moment`` to the first Redis hit on a key of ``slots``."""
    from redis.crc import key_slot

    for at, seed in sorted(hits):
        if at < moment:
            continue
        slot = key_slot(redis_key(seed, fingerprint).encode())
        if any(low <= slot <= high for low, high in slots):
            return at - moment
    return None


def _error_counts(urls: list[str]) -> dict[str, float]:
    """``cachefleet_cache_errors_total`` of every server, summed by ``kind``."""
    counts: dict[str, float] = {}
    for url in urls:
        for tier_kind, value in server_metrics.read(f"{url}/metrics", MODEL).errors.items():
            kind = tier_kind.partition("/")[2]
            counts[kind] = counts.get(kind, 0.0) + value
    return counts
