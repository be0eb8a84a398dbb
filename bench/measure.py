"""Measure one scenario against a running server: warm the cache, load it, read the counters."""

from __future__ import annotations

import http.client
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from cachefleet.bench import profiling, server_metrics
from cachefleet.bench.bodies import RequestSet, build_request_set, inputs_from_metadata, new_nonce
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.processes import cpu_seconds
from cachefleet.bench.scenarios import Scenario

LoadRunner = Callable[[LoadSpec], LoadResult]
_WANTED_HIT = {
    "local": "hit-local",
    "tiered": "hit-local",
    "redis": "hit-redis",
    "redis-cluster": "hit-redis",
    "tiered-cluster": "hit-local",
}
#: The tiers each cache mode has, whose admission decisions the report shows.
_TIERS = {
    "local": ("local",),
    "redis": ("redis",),
    "tiered": ("local", "redis"),
    "redis-cluster": ("redis",),
    "tiered-cluster": ("local", "redis"),
}


@dataclass(frozen=True)
class Measurement:
    """A scenario's figures: the client's view plus the server's CPU and cache counters."""

    scenario: Scenario
    load: LoadResult
    server_cpu_s: float
    measured_hit_ratio: float | None
    hits_by_tier: Mapping[str, float]
    #: Cache errors the server counted in the measured window, by ``tier/kind``.
    cache_errors: Mapping[str, float]
    warm_status: str
    #: p50 of a short run with one connection (100%-hit scenarios only): latency without queueing.
    single_connection_p50_ms: float | None = None
    #: Share of py-spy samples per layer during the measured window (``--profile`` only).
    profile: Mapping[str, float] = field(default_factory=dict)
    #: The server's cache admission decision per tier for the scenario's model at the end of
    #: the measured window (``admitted``, ``skipped``, ``not measured``); empty without tiers.
    admission: Mapping[str, str] = field(default_factory=dict)
    #: CPU seconds of the target's upstream (the server it fronts) over the measured window;
    #: None when it fronts none.
    upstream_cpu_s: float | None = None

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu_s / self.load.requests if self.load.requests else 0.0

    @property
    def upstream_cpu_ms_per_request(self) -> float | None:
        if self.upstream_cpu_s is None:
            return None
        return 1000 * self.upstream_cpu_s / self.load.requests if self.load.requests else 0.0


@dataclass(frozen=True)
class Target:
    """Where the load goes: the server's URL and the pid whose CPU time is charged."""

    base_url: str
    pid: int
    #: Where its Prometheus metrics are (Triton serves them on a port of their own).
    metrics_url: str = ""
    #: ``host:port`` of the server's gRPC endpoint, when it has one.
    grpc_address: str | None = None
    #: The pid of the server it fronts (cachefleet in upstream mode), charged separately.
    upstream_pid: int | None = None

    @property
    def pids(self) -> tuple[int, ...]:
        """Every process that serves this target's requests (settled before each load)."""
        return (self.pid,) if self.upstream_pid is None else (self.pid, self.upstream_pid)

    @property
    def metrics(self) -> str:
        return self.metrics_url or f"{self.base_url}/metrics"


def request_set(base_url: str, scenario: Scenario) -> RequestSet:
    """Bodies for the scenario's model, shaped from the server's own model metadata."""
    metadata = get_json(base_url, f"/v2/models/{scenario.model}")
    outputs = [str(entry["name"]) for entry in metadata.get("outputs", [])]
    return build_request_set(
        scenario.model, inputs_from_metadata(metadata), outputs, scenario.encoding
    )


def measure(
    target: Target,
    scenario: Scenario,
    requests: RequestSet,
    *,
    run_load: LoadRunner,
    connections: int,
    duration_s: float,
    warmup_s: float,
    client_cpus: str | None,
    probe_s: float = 0.0,
    profile_dir: Path | None = None,
    load: tuple[str, RequestSet] | None = None,
) -> Measurement:
    """Warm the cache with the hit set, run an unmeasured warm-up, then the measured load.

    For 100%-hit scenarios, a ``probe_s`` run with a single connection follows. With
    ``profile_dir``, py-spy samples the server during the measured load. ``load`` sends the
    load elsewhere than the warm-up posts (address and requests: gRPC's, for the same tensors).
    """
    settle(*target.pids)
    warm_status = warm(target.base_url, requests, scenario) if scenario.hit_ratio > 0 else "-"

    address, load_requests = load or (target.base_url, requests)

    def spec(seconds: float, conns: int = connections) -> LoadSpec:
        return LoadSpec(
            address, load_requests, conns, seconds, scenario.hit_ratio, new_nonce(), client_cpus
        )

    settle(*target.pids)
    if warmup_s > 0:
        run_load(spec(warmup_s))
        settle(*target.pids)
    counters_before = server_metrics.read(target.metrics, scenario.model)
    sampler = None
    if profile_dir is not None and profiling.executable():
        raw = profile_dir / f"{uuid.uuid4().hex}.txt"
        sampler = profiling.start(target.pid, duration_s, raw, client_cpus)
    upstream = target.upstream_pid
    cpu_before = cpu_seconds(target.pid)
    upstream_before = cpu_seconds(upstream) if upstream is not None else 0.0
    result = run_load(spec(duration_s))
    cpu_after = cpu_seconds(target.pid)
    upstream_after = cpu_seconds(upstream) if upstream is not None else 0.0
    profile = _finish(sampler, raw) if sampler is not None else {}
    counters = server_metrics.read(target.metrics, scenario.model).minus(counters_before)
    # Under 8 connections a p50 is mostly queueing (8 x the service time); one connection
    # shows what a single hit costs, which is what "a Redis hit vs a local hit" asks.
    single = None
    if probe_s > 0 and scenario.group == "hits":
        settle(*target.pids)
        single = run_load(spec(probe_s, 1))
    return Measurement(
        scenario=scenario,
        load=result,
        server_cpu_s=cpu_after - cpu_before,
        measured_hit_ratio=counters.hit_ratio,
        hits_by_tier=counters.hits_by_tier,
        cache_errors=counters.errors,
        warm_status=warm_status,
        single_connection_p50_ms=single.p50_ms if single else None,
        profile=profile,
        admission=admission(scenario, counters.admission),
        upstream_cpu_s=upstream_after - upstream_before if upstream is not None else None,
    )


def admission(scenario: Scenario, read: Mapping[str, str]) -> dict[str, str]:
    """The decisions read from the server, with every tier of the scenario's cache mode:
    one the server reported nothing for has not been measured for the model."""
    if scenario.server != "cachefleet":
        return {}
    decisions = {
        tier: server_metrics.NOT_MEASURED
        for tier in _TIERS.get(scenario.cache, ())
        if not any(name == tier or name.startswith(f"{tier} ") for name in read)
    }
    return dict(sorted({**read, **decisions}.items()))


def _finish(sampler: subprocess.Popen[bytes], raw: Path) -> dict[str, float]:
    try:
        sampler.wait(30)
    except subprocess.TimeoutExpired:
        sampler.kill()
        sampler.wait(5)
    return profiling.summarize(raw)


def settle(
    *pids: int, idle_share: float = 0.05, window_s: float = 0.25, limit_s: float = 60
) -> None:
    """Wait until the servers are idle: wrk stops without waiting for the answers in flight,
    and a model like densenet_onnx can take seconds to work through them. Measuring before
    they drain would charge one scenario's backlog to the next.
    """

    def busy() -> float:
        return sum(cpu_seconds(pid) for pid in pids)

    deadline = time.monotonic() + limit_s
    before = busy()
    while time.monotonic() < deadline:
        time.sleep(window_s)
        after = busy()
        if after - before < idle_share * window_s:
            return
        before = after


def warm(base_url: str, requests: RequestSet, scenario: Scenario, passes: int = 4) -> str:
    """Post every hit body until the server answers them from the tier the scenario measures.

    Inserts are write-behind, so a pass can come back before the previous pass's entries
    landed; a few passes with a short pause settle it. Returns the X-Cache values last seen.
    """
    wanted = _WANTED_HIT.get(scenario.cache) if scenario.server == "cachefleet" else None
    seen: set[str] = set()
    for attempt in range(passes):
        seen = {post(base_url, requests, body) for body in requests.hit_bodies}
        if wanted is None or seen == {wanted}:
            break
        time.sleep(0.2 * (attempt + 1))
    return ",".join(sorted(seen))


def post(base_url: str, requests: RequestSet, body: bytes) -> str:
    """POST one body; returns its X-Cache header (``-`` when absent). Non-2xx raises."""
    answer = exchange(base_url, "POST", requests.path, body, dict(requests.headers))
    if not 200 <= answer.status < 300:
        raise BenchError(
            f"POST {base_url}{requests.path} answered {answer.status}: {answer.body[:500]!r}"
        )
    return answer.header("X-Cache") or "-"


def get_json(base_url: str, path: str) -> dict[str, Any]:
    answer = exchange(base_url, "GET", path)
    if answer.status != 200:
        raise BenchError(f"GET {base_url}{path} answered {answer.status}: {answer.body[:500]!r}")
    document = orjson.loads(answer.body)
    if not isinstance(document, dict):
        raise BenchError(f"GET {base_url}{path} did not return a JSON object")
    return document


@dataclass(frozen=True)
class Exchanged:
    """A whole answer to one request: status, headers as sent, body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


def exchange(
    base_url: str,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 60,
) -> Exchanged:
    """One request on a connection of its own, read whole; a failure to talk raises
    :class:`BenchError` (any status is returned: the caller decides what it accepts)."""
    parts = urlsplit(base_url)
    connection = http.client.HTTPConnection(
        parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout_s
    )
    try:
        connection.request(method, path, body=body or None, headers=dict(headers or {}))
        response = connection.getresponse()
        return Exchanged(response.status, response.getheaders(), response.read())
    except (OSError, http.client.HTTPException) as error:
        raise BenchError(f"{method} {base_url}{path} failed: {error}") from None
    finally:
        connection.close()
