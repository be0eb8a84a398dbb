"""A fallback load generator from the standard library: one process per connection.

Used when ``wrk`` is not installed (the demo must work from a bare ``pip install``) or when
asked for. Each process keeps one ``http.client`` connection alive and posts back to back; it is
slower than wrk, so figures from it understate the server, and the reports say which one ran.
"""

from __future__ import annotations

import http.client
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec, bodies


@dataclass(frozen=True)
class SenderReport:
    latencies_s: list[float]
    errors: int
    elapsed_s: float


#: One sender process: (spec, sender id, common start time) -> what it saw. Must be picklable.
Sender = Callable[[LoadSpec, int, float], SenderReport]


def run(spec: LoadSpec) -> LoadResult:
    """Run ``spec.connections`` HTTP sender processes for ``spec.duration_s``."""
    return run_senders(spec, _send, "python")


def run_senders(spec: LoadSpec, send: Sender, name: str) -> LoadResult:
    """Run ``spec.connections`` ``send`` processes for ``spec.duration_s``, merge their figures."""
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 1.0 + 0.1 * spec.connections
    with context.Pool(spec.connections) as pool:
        jobs = [
            pool.apply_async(send, (spec, sender, start_at)) for sender in range(spec.connections)
        ]
        reports = [job.get(timeout=spec.duration_s + 60) for job in jobs]
    latencies = sorted(value for report in reports for value in report.latencies_s)
    if not latencies:
        raise BenchError("the Python load generator completed no request")
    elapsed = max(report.elapsed_s for report in reports)
    return LoadResult(
        requests=len(latencies),
        duration_s=elapsed,
        errors=sum(report.errors for report in reports),
        p50_ms=_percentile(latencies, 50) * 1000,
        p90_ms=_percentile(latencies, 90) * 1000,
        p99_ms=_percentile(latencies, 99) * 1000,
        generator=f"{name} ({spec.connections} processes)",
    )


def _percentile(sorted_values: list[float], percent: float) -> float:
    index = min(len(sorted_values) - 1, int(len(sorted_values) * percent / 100))
    return sorted_values[index]


def _send(spec: LoadSpec, sender: int, start_at: float) -> SenderReport:
    """One sender: wait for the common start, then post until the duration is over."""
    return send_bodies(spec, bodies(spec, sender), start_at)


def send_bodies(spec: LoadSpec, sequence: Iterable[bytes], start_at: float) -> SenderReport:
    """Post ``sequence`` in order on one connection from the common start, until it ends or
    the duration is over (a sender of a fixed workload ends with its sequence)."""
    if spec.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in spec.cpus.split(",")})
    parts = urlsplit(spec.base_url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80)
    requests = spec.requests
    latencies: list[float] = []
    errors = 0
    time.sleep(max(0.0, start_at - time.time()))
    began = time.perf_counter()
    deadline = began + spec.duration_s
    for body in sequence:
        if time.perf_counter() >= deadline:
            break
        sent = time.perf_counter()
        ok = _post(connection, requests, body)
        latencies.append(time.perf_counter() - sent)
        if not ok:
            errors += 1
            connection.close()
    connection.close()
    return SenderReport(latencies, errors, time.perf_counter() - began)


def _post(connection: http.client.HTTPConnection, requests: RequestSet, body: bytes) -> bool:
    try:
        connection.request("POST", requests.path, body=body, headers=dict(requests.headers))
        response = connection.getresponse()
        response.read()
        return 200 <= response.status < 300
    except (OSError, http.client.HTTPException):
        return False
