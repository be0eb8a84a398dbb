"""One chaos run: client processes, the fault schedule and the planter, then the figures.

The same :func:`run_chaos` drives the reliability test (short) and ``cachefleet bench --chaos``.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from typing import Any

from cachefleet.bench import server_metrics
from cachefleet.bench.chaos.answers import MODEL
from cachefleet.bench.chaos.clients import ClientResult, client_main
from cachefleet.bench.chaos.control import ChaosOptions, Log
from cachefleet.bench.chaos.faults import Conductor, FaultLog
from cachefleet.bench.chaos.planted import Planter
from cachefleet.bench.chaos.report import ChaosReport
from cachefleet.bench.processes import RedisServer


def run_chaos(
    urls: list[str], redis: RedisServer, options: ChaosOptions, log: Log = print
) -> ChaosReport:
    """Load every server in ``urls`` from client processes while ``redis`` misbehaves."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    conductor = Conductor(redis, options, log)
    planting = Planter(redis, conductor.faults, conductor.stop)
    started = time.time()
    stop_at = started + options.duration_s + 2.0  # spawned clients take a moment to start
    clients = [
        context.Process(
            target=client_main,
            args=(index, urls, stop_at, options.request_timeout_s, results),
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
    return _report(gathered, conductor.faults, urls, options, time.time() - started)


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
) -> ChaosReport:
    latencies = sorted(x for r in results for x in r.latencies_s)
    hits = sorted(x for r in results for x in r.hit_redis_at)
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
        resume_s=[_first_after(hits, back) for back in faults.back_at],
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


def _error_counts(urls: list[str]) -> dict[str, float]:
    """``cachefleet_cache_errors_total`` of every server, summed by ``kind``."""
    counts: dict[str, float] = {}
    for url in urls:
        for tier_kind, value in server_metrics.read(f"{url}/metrics", MODEL).errors.items():
            kind = tier_kind.partition("/")[2]
            counts[kind] = counts.get(kind, 0.0) + value
    return counts
