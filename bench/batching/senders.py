"""The load of the batching run: one process per client, each with one keep-alive connection,
posting its own bodies back to back, counting answers by ``X-Cache``."""

from __future__ import annotations

import http.client
import multiprocessing
import os
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

from cachefleet.bench.batching.traffic import ModelInputs, Traffic, split_body
from cachefleet.bench.errors import BenchError


@dataclass(frozen=True)
class LoadPlan:
    base_url: str
    model: str
    inputs: ModelInputs
    rows: int
    repeat_share: float
    clients: int
    duration_s: float
    nonce: int
    cpus: str | None


@dataclass(frozen=True)
class LoadFigures:
    requests: int
    errors: int
    elapsed_s: float
    p50_ms: float
    p99_ms: float
    x_cache: dict[str, int]

    @property
    def throughput(self) -> float:
        return self.requests / self.elapsed_s if self.elapsed_s else 0.0


@dataclass(frozen=True)
class _Report:
    latencies_s: list[float]
    errors: int
    x_cache: dict[str, int]
    elapsed_s: float


def warm(plan: LoadPlan) -> None:
    """Send the pool of repeated rows once, so that the caches hold them."""
    traffic = Traffic(plan.inputs, plan.rows, plan.repeat_share, plan.nonce, 0)
    connection = _connect(plan.base_url)
    try:
        for body in traffic.pool_bodies():
            status, _ = _post(connection, plan.model, body)
            if status != 200:
                raise BenchError(f"warming {plan.model}: HTTP {status}")
    finally:
        connection.close()


def run(plan: LoadPlan) -> LoadFigures:
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 1.0 + 0.1 * plan.clients
    with context.Pool(plan.clients) as pool:
        jobs = [pool.apply_async(_send, (plan, sender, start_at)) for sender in range(plan.clients)]
        reports = [job.get(timeout=plan.duration_s + 120) for job in jobs]
    latencies = sorted(value for report in reports for value in report.latencies_s)
    if not latencies:
        raise BenchError(f"{plan.model}: no request completed")
    tally: Counter[str] = Counter()
    for report in reports:
        tally.update(report.x_cache)
    return LoadFigures(
        requests=len(latencies),
        errors=sum(report.errors for report in reports),
        elapsed_s=max(report.elapsed_s for report in reports),
        p50_ms=_percentile(latencies, 50) * 1000,
        p99_ms=_percentile(latencies, 99) * 1000,
        x_cache=dict(tally),
    )


def _send(plan: LoadPlan, sender: int, start_at: float) -> _Report:
    if plan.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in plan.cpus.split(",")})
    traffic = Traffic(plan.inputs, plan.rows, plan.repeat_share, plan.nonce, sender + 1)
    connection = _connect(plan.base_url)
    latencies: list[float] = []
    errors = 0
    tally: Counter[str] = Counter()
    time.sleep(max(0.0, start_at - time.time()))
    began = time.perf_counter()
    deadline = began + plan.duration_s
    while time.perf_counter() < deadline:
        body = traffic.next_body()
        sent = time.perf_counter()
        status, x_cache = _post(connection, plan.model, body)
        latencies.append(time.perf_counter() - sent)
        tally[x_cache] += 1
        if status != 200:
            errors += 1
            connection.close()
            connection = _connect(plan.base_url)
    connection.close()
    return _Report(latencies, errors, dict(tally), time.perf_counter() - began)


def _connect(base_url: str) -> http.client.HTTPConnection:
    parts = urlsplit(base_url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=300)


def _post(connection: http.client.HTTPConnection, model: str, body: bytes) -> tuple[int, str]:
    header_length, payload = split_body(body)
    try:
        connection.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=payload,
            headers={"Inference-Header-Content-Length": str(header_length)},
        )
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("X-Cache") or "?"
    except (OSError, http.client.HTTPException):
        return 0, "error"


def _percentile(sorted_values: list[float], percent: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * percent / 100))]
