"""The parts of ``cachefleet bench --upstream`` that run without Triton: the Zipf workload the
fleets are sent, the order of the side-by-side scenarios and their cores, and how a row
through cachefleet is set beside Triton's in the report."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

from cachefleet.bench.bodies import InputSpec, build_request_set
from cachefleet.bench.load import LoadResult
from cachefleet.bench.measure import Measurement
from cachefleet.bench.pinning import CpuPlan
from cachefleet.bench.upstream import plan
from cachefleet.bench.upstream.fleet import Counters, FleetResult, Workload
from cachefleet.bench.upstream.plan import Pins, UpstreamScenario
from cachefleet.bench.upstream.report import Record, render

SIMPLE = [InputSpec("INPUT0", "INT32", (1, 16)), InputSpec("INPUT1", "INT32", (1, 16))]


def test_the_workload_is_skewed_fixed_and_different_per_server() -> None:
    workload = Workload(distinct=200, exponent=1.0, draws=5000)
    first, again, second = workload.ranks(0), workload.ranks(0), workload.ranks(1)
    assert list(first) == list(again)
    assert list(first) != list(second)
    counts = Counter(first.tolist())
    # Zipf: the first input about twice as often as the second, far more than the median one.
    assert counts[0] > counts[1] > counts[100]
    assert counts[0] > 10 * max(counts[100], 1)
    assert min(first) >= 0
    assert max(first) < 200


def test_each_server_sends_the_distinct_bodies_in_its_own_order() -> None:
    workload = Workload(distinct=50, draws=400)
    inputs = build_request_set("simple", SIMPLE, ["OUTPUT0"], "binary", warm_count=50)
    sets = workload.request_sets(inputs, 3)
    assert [len(s.hit_bodies) for s in sets] == [400, 400, 400]
    assert set(sets[0].hit_bodies) <= set(inputs.hit_bodies)
    assert sets[0].hit_bodies != sets[1].hit_bodies
    assert sets[0].hit_bodies == tuple(inputs.hit_bodies[i] for i in workload.ranks(0))
    drawn = {inputs.hit_bodies.index(body) for s in sets for body in s.hit_bodies}
    assert workload.distinct_drawn(3) == len(drawn)


def test_each_side_is_measured_right_after_the_other_and_the_generator_avoids_its_core() -> None:
    labels = [s.label for s in plan.build(["simple"], perf_analyzer=True)]
    assert labels == [
        "simple hits Triton alone by wrk (HTTP)",
        "simple hits cachefleet -> Triton by wrk (HTTP)",
        "simple hits Triton alone by perf_analyzer (gRPC)",
        "simple hits cachefleet -> Triton by perf_analyzer (gRPC)",
        "simple misses Triton alone by wrk (HTTP)",
        "simple misses cachefleet -> Triton by wrk (HTTP)",
        "simple misses Triton alone by wrk (HTTP, 1 conn)",
        "simple misses cachefleet -> Triton by wrk (HTTP, 1 conn)",
    ]
    assert not [s for s in plan.build(["simple"], perf_analyzer=False) if s.transport == "gRPC"]
    pins = Pins.of(CpuPlan("0", "1"))
    assert (pins.front, pins.triton) == ("0", "1")
    assert pins.generator("triton") == "0"
    assert pins.generator("front") == "1"
    assert Pins.of(CpuPlan(None, None)).generator("front") is None


def _measured(requests: int, cpu_s: float, upstream_cpu_s: float | None) -> Measurement:
    load = LoadResult(requests, 1.0, 0, 0.2, 0.3, 0.5, "wrk")
    return Measurement(
        UpstreamScenario("hits", "simple", "triton").scenario, load, cpu_s, 1.0, {}, {}, "-",
        upstream_cpu_s=upstream_cpu_s,
    )  # fmt: skip


def _record() -> Record:
    return Record(
        command="cachefleet bench --upstream", started=datetime(2026, 12, 2, tzinfo=UTC),
        pins=Pins("0", "1"), duration_s=10, warmup_s=2, probe_s=2, connections=8, replicas=4,
        workload=Workload(), fleet_s=300, load_average=(0.5, 0.7),
    )  # fmt: skip


def test_a_row_through_cachefleet_is_a_share_of_triton_alone_by_rate_and_by_cpu() -> None:
    record = _record()
    record.rows += [
        (UpstreamScenario("hits", "simple", "triton"), _measured(10_000, 0.4, None)),
        (UpstreamScenario("hits", "simple", "front"), _measured(5_000, 0.3, 0.1)),
    ]
    text = render(record)
    triton, front = [line for line in text.splitlines() if line.startswith("| simple |")]
    # Triton alone: its CPU in Triton's column; through cachefleet: both, summed, and Triton's
    # 0.040 ms/req over the hop's 0.080 as the share by CPU.
    assert "| Triton alone | 100.0% | 10000 |" in triton
    assert "| - | 0.040 | 0.040 | - | - |" in triton
    assert "| 0.060 | 0.020 | 0.080 | 0.50x | 0.50x | 0 |" in front
    assert "Load average (1 min) at start / end: 0.50 / 0.70" in text


def test_the_fleet_row_says_how_often_each_distinct_input_was_computed() -> None:
    record = _record()
    loads = tuple(LoadResult(15_000, 10.0, 0, 1.0, 2.0, p99, "python") for p99 in (4.0, 9.0))
    counters = Counters(4400, 4000, {"local": 40_000, "redis": 15_600}, 4400, 30.0)
    record.fleets.append(FleetResult("replicas", loads, counters, 4000, complete=True))
    row = next(line for line in render(record).splitlines() if line.startswith("| replicas |"))
    assert row.startswith("| replicas | 30000 | 4000 | 4400 | 1.10 | 4000 | 92.7% |")
    assert "| local 40000, redis 15600 | 3000 | 9.00 | 1.000 | 0 |" in row
