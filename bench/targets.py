"""The performance targets, checked against a run's figures: what we got, not what we hoped.

Each target is judged twice. As stated, on throughput (or latency) as the client saw it; and on
the server's CPU time per request, which is what one dedicated core would turn into requests
per second. On a machine shared with other work the first moves with whatever else runs on
the server's core; the second hardly does. The report shows both, never just the kinder one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cachefleet.bench.measure import Measurement


@dataclass(frozen=True)
class TargetCheck:
    """One target: what it asks, what was measured, and whether that meets it."""

    target: str
    measured: str
    met: bool | None  # None: not measured in this run
    #: The same criterion applied to server CPU per request (None: not measured).
    met_by_cpu: bool | None = None


def check(measurements: Sequence[Measurement]) -> list[TargetCheck]:
    find = _Finder(measurements)
    checks = [_densenet_speedup(find), _redis_vs_local_p50(find)]
    checks += _simple_hits_never_slower(find)
    checks += _simple_miss_overhead(find)
    checks.append(_peer(find))
    checks += _triton_hits(find)
    checks += _miss_cpu_overhead(find)
    checks.append(_simple_redis_vs_local_p50(find))
    return checks


class _Finder:
    def __init__(self, measurements: Sequence[Measurement]) -> None:
        self._measurements = measurements

    def __call__(
        self,
        model: str,
        cache: str,
        hit_ratio: float,
        encoding: str = "binary",
        server: str = "cachefleet",
    ) -> Measurement | None:
        for measurement in self._measurements:
            s = measurement.scenario
            if s.group == "transport":  # its own comparison, with other load generators
                continue
            if (s.model, s.cache, s.hit_ratio, s.encoding, s.server) == (
                model, cache, hit_ratio, encoding, server
            ):  # fmt: skip
                return measurement
        return None


def _cpu(ours: Measurement, reference: Measurement) -> str:
    return f"server CPU {ours.cpu_ms_per_request:.3f} vs {reference.cpu_ms_per_request:.3f} ms/req"


def _usable(*measurements: Measurement | None) -> bool:
    return all(
        m is not None and m.load.throughput > 0 and m.cpu_ms_per_request > 0 for m in measurements
    )


def _unmeasured(target: str) -> TargetCheck:
    return TargetCheck(target, "not measured", None)


def _densenet_speedup(find: _Finder) -> TargetCheck:
    target = "densenet_onnx, 100% hits: tiered >= 20x no-cache throughput"
    tiered, none = find("densenet_onnx", "tiered", 1.0), find("densenet_onnx", "none", 1.0)
    if tiered is None or none is None or not _usable(tiered, none):
        return _unmeasured(target)
    ratio = tiered.load.throughput / none.load.throughput
    cpu_ratio = none.cpu_ms_per_request / tiered.cpu_ms_per_request
    return TargetCheck(
        target,
        f"{ratio:.1f}x ({tiered.load.throughput:.0f} vs {none.load.throughput:.1f} req/s); "
        f"by CPU {cpu_ratio:.0f}x, {_cpu(tiered, none)}",
        ratio >= 20,
        cpu_ratio >= 20,
    )


def _redis_vs_local_p50(find: _Finder) -> TargetCheck:
    target = "densenet_onnx, 100% hits: Redis hit p50 within 1 ms of a local hit's"
    redis, local = find("densenet_onnx", "redis", 1.0), find("densenet_onnx", "local", 1.0)
    if redis is None or local is None or not _usable(redis, local):
        return _unmeasured(target)
    loaded_gap = redis.load.p50_ms - local.load.p50_ms
    cpu_gap = redis.cpu_ms_per_request - local.cpu_ms_per_request
    loaded = f"8 conn {loaded_gap:+.2f} ms ({redis.load.p50_ms:.2f} vs {local.load.p50_ms:.2f})"
    cpu = f"CPU {cpu_gap:+.3f} ms/req"
    redis_single, local_single = redis.single_connection_p50_ms, local.single_connection_p50_ms
    if redis_single is None or local_single is None:
        return TargetCheck(target, f"{loaded}; {cpu}", loaded_gap <= 1.0, cpu_gap <= 1.0)
    gap = redis_single - local_single
    return TargetCheck(
        target,
        f"1 conn {gap:+.2f} ms ({redis_single:.2f} vs {local_single:.2f} ms); {loaded}; {cpu}",
        gap <= 1.0,
        cpu_gap <= 1.0,
    )


def _simple_hits_never_slower(find: _Finder) -> list[TargetCheck]:
    checks = []
    none = find("simple", "none", 1.0)
    for cache in ("local", "redis", "tiered"):
        target = f"simple, 100% hits: {cache} not slower than no cache"
        cached = find("simple", cache, 1.0)
        if cached is None or none is None or not _usable(cached, none):
            checks.append(_unmeasured(target))
            continue
        ratio = cached.load.throughput / none.load.throughput
        cpu_ratio = none.cpu_ms_per_request / cached.cpu_ms_per_request
        measured = (
            f"{ratio:.2f}x no-cache throughput; by CPU {cpu_ratio:.2f}x, {_cpu(cached, none)}"
        )
        checks.append(TargetCheck(target, measured, ratio >= 1.0, cpu_ratio >= 1.0))
    return checks


def _simple_miss_overhead(find: _Finder) -> list[TargetCheck]:
    checks = []
    none = find("simple", "none", 0.0)
    for cache in ("local", "redis", "tiered"):
        target = f"simple, 0% hits: {cache} miss path costs <= 10% throughput"
        cached = find("simple", cache, 0.0)
        if cached is None or none is None or not _usable(cached, none):
            checks.append(_unmeasured(target))
            continue
        cost = 1 - cached.load.throughput / none.load.throughput
        cpu_cost = 1 - none.cpu_ms_per_request / cached.cpu_ms_per_request
        measured = f"{cost:+.1%} throughput; by CPU {cpu_cost:+.1%}, {_cpu(cached, none)}"
        checks.append(TargetCheck(target, measured, cost <= 0.10, cpu_cost <= 0.10))
    return checks


def _peer(find: _Finder) -> TargetCheck:
    target = "simple, JSON, no cache: >= 2x KServe's Python server"
    ours, theirs = (
        find("simple", "none", 1.0, "json"),
        find("simple", "none", 1.0, "json", "kserve"),
    )
    if ours is None or theirs is None or not _usable(ours, theirs):
        return _unmeasured(target)
    ratio = ours.load.throughput / theirs.load.throughput
    cpu_ratio = theirs.cpu_ms_per_request / ours.cpu_ms_per_request
    return TargetCheck(
        target,
        f"{ratio:.2f}x ({ours.load.throughput:.0f} vs {theirs.load.throughput:.0f} req/s); "
        f"by CPU {cpu_ratio:.2f}x, {_cpu(ours, theirs)}",
        ratio >= 2.0,
        cpu_ratio >= 2.0,
    )


def _triton_hits(find: _Finder) -> list[TargetCheck]:
    """Our local hit against Triton's, on the same core: the cost of a hit is the product."""
    checks = []
    for model, floor, goal in (("simple", 0.6, " (goal >= 1.0x)"), ("densenet_onnx", 2.5, "")):
        target = f"{model}, 100% hits: local >= {floor:g}x Triton's throughput{goal}"
        ours, triton = find(model, "local", 1.0), find(model, "local", 1.0, server="triton")
        if ours is None or triton is None or not _usable(ours, triton):
            checks.append(_unmeasured(target))
            continue
        ratio = ours.load.throughput / triton.load.throughput
        cpu_ratio = triton.cpu_ms_per_request / ours.cpu_ms_per_request
        checks.append(
            TargetCheck(
                target,
                f"{ratio:.2f}x ({ours.load.throughput:.0f} vs {triton.load.throughput:.0f} "
                f"req/s); by CPU {cpu_ratio:.2f}x, {_cpu(ours, triton)}",
                ratio >= floor,
                cpu_ratio >= floor,
            )
        )
    return checks


def _miss_cpu_overhead(find: _Finder) -> list[TargetCheck]:
    """What caching adds to a miss, in server CPU per request over ``--cache none``."""
    checks = []
    none = find("simple", "none", 0.0)
    for cache, limit in (("local", 0.10), ("tiered", 0.10), ("redis", 0.25)):
        target = f"simple, 0% hits: {cache} server CPU/request <= {limit:.0%} over no cache"
        cached = find("simple", cache, 0.0)
        if cached is None or none is None or not _usable(cached, none):
            checks.append(_unmeasured(target))
            continue
        extra = cached.cpu_ms_per_request / none.cpu_ms_per_request - 1
        slower = none.load.throughput / cached.load.throughput - 1
        checks.append(
            TargetCheck(
                target,
                f"CPU {extra:+.1%}, {_cpu(cached, none)}; throughput cost {slower:+.1%}",
                extra <= limit,
                extra <= limit,
            )
        )
    return checks


def _simple_redis_vs_local_p50(find: _Finder) -> TargetCheck:
    target = "simple, 100% hits: Redis hit p50 within 0.3 ms of a local hit's, 1 connection"
    redis, local = find("simple", "redis", 1.0), find("simple", "local", 1.0)
    if redis is None or local is None or not _usable(redis, local):
        return _unmeasured(target)
    redis_single, local_single = redis.single_connection_p50_ms, local.single_connection_p50_ms
    if redis_single is None or local_single is None:
        return _unmeasured(target)
    gap = redis_single - local_single
    cpu_gap = redis.cpu_ms_per_request - local.cpu_ms_per_request
    return TargetCheck(
        target,
        f"1 conn {gap:+.3f} ms ({redis_single:.3f} vs {local_single:.3f} ms); "
        f"CPU {cpu_gap:+.3f} ms/req",
        gap <= 0.3,
        cpu_gap <= 0.3,
    )
