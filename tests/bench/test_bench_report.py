"""The report's judgements: targets from figures, and py-spy samples summed by layer."""

from __future__ import annotations

from pathlib import Path

from cachefleet.bench import report, server_metrics
from cachefleet.bench.load import LoadResult
from cachefleet.bench.measure import Measurement, admission
from cachefleet.bench.profiling import summarize
from cachefleet.bench.scenarios import Group, Scenario, Transport
from cachefleet.bench.targets import check


def _measurement(
    model: str, cache: str, ratio: float, throughput: float, p50_ms: float = 1.0
) -> Measurement:
    load = LoadResult(
        requests=int(throughput * 10), duration_s=10.0, errors=0, p50_ms=p50_ms, p90_ms=p50_ms,
        p99_ms=p50_ms, generator="wrk",
    )  # fmt: skip
    group: Group = "hits" if ratio == 1.0 else "misses"
    return Measurement(
        scenario=Scenario(group, model, cache, ratio), load=load, server_cpu_s=1.0,
        measured_hit_ratio=None, hits_by_tier={}, cache_errors={}, warm_status="-",
        single_connection_p50_ms=p50_ms,
    )  # fmt: skip


def test_targets_are_met_or_missed_from_the_figures_and_unmeasured_ones_say_so() -> None:
    checks = {c.target: c for c in check([
        _measurement("densenet_onnx", "none", 1.0, 3.0),
        _measurement("densenet_onnx", "tiered", 1.0, 300.0),
        _measurement("densenet_onnx", "local", 1.0, 300.0, p50_ms=1.0),
        _measurement("densenet_onnx", "redis", 1.0, 250.0, p50_ms=2.5),
        _measurement("simple", "none", 0.0, 1000.0),
        _measurement("simple", "local", 0.0, 950.0),
        _measurement("simple", "redis", 0.0, 500.0),
    ])}  # fmt: skip

    assert checks["densenet_onnx, 100% hits: tiered >= 20x no-cache throughput"].met is True
    redis_p50 = checks["densenet_onnx, 100% hits: Redis hit p50 within 1 ms of a local hit's"]
    assert redis_p50.met is False
    assert "+1.50 ms" in redis_p50.measured
    assert checks["simple, 0% hits: local miss path costs <= 10% throughput"].met is True
    redis_miss = checks["simple, 0% hits: redis miss path costs <= 10% throughput"]
    assert redis_miss.met is False
    assert redis_miss.met_by_cpu is False  # here CPU per request follows throughput exactly
    assert "+50.0%" in redis_miss.measured
    tiered_miss = checks["simple, 0% hits: tiered miss path costs <= 10% throughput"]
    assert (tiered_miss.met, tiered_miss.measured) == (None, "not measured")


def test_the_report_lists_the_targets_a_run_measured_and_counts_the_others() -> None:
    """A demo measures two targets of sixteen: fourteen rows of "not measured" told its reader
    nothing; one line says why they are missing."""
    lines = report._targets([
        _measurement("simple", "none", 0.0, 1000.0),
        _measurement("simple", "local", 0.0, 950.0),
    ])  # fmt: skip
    rows = [line for line in lines if line.startswith("| simple")]
    assert rows
    assert all("not measured" not in row for row in rows)
    total = len(check([]))
    assert any(line.startswith(f"{total - len(rows)} of the {total} targets") for line in lines)


def test_profile_shares_leave_out_waiting_threads(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text(
        "main (cli/main.py:1);Runner.run (asyncio/runners.py:118);"
        "compute_key (runtime/cache/key.py:90) 30\n"
        "main (cli/main.py:1);Runner.run (asyncio/runners.py:118);"
        "data_received (uvicorn/protocols/http/httptools_impl.py:174) 70\n"
        "Thread.run (threading.py:982);_worker (concurrent/futures/thread.py:81) 500\n"
    )
    assert summarize(raw) == {"uvicorn/httptools": 0.7, "cache key (BLAKE3)": 0.3}
    assert summarize(tmp_path / "missing.txt") == {}


GRPC_SIMPLE = "simple, 100% hits, gRPC: local >= 0.35x Triton (perf_analyzer) (goal >= 1.0x)"
HTTP_SIMPLE = "simple, 100% hits, HTTP: local >= 1.0x Triton by wrk and by perf_analyzer"
HTTP_DENSENET = "densenet_onnx, 100% hits, HTTP: local >= 3x Triton by wrk and by perf_analyzer"


def _peer_measurement(
    model: str, ratio: float, throughput: float, cpu_s: float, server: str = "cachefleet",
    cache: str = "local", p50_ms: float = 1.0, generator: str = "wrk",
    transport: Transport = "http",
) -> Measurement:  # fmt: skip
    load = LoadResult(
        requests=int(throughput * 10), duration_s=10.0, errors=0, p50_ms=p50_ms, p90_ms=p50_ms,
        p99_ms=p50_ms, generator=generator,
    )  # fmt: skip
    group: Group = "hits" if ratio == 1.0 else "misses"
    if generator == "perf_analyzer":
        group = "judge"
    return Measurement(
        scenario=Scenario(
            group, model, cache, ratio, server=server, transport=transport  # type: ignore[arg-type]
        ),
        load=load, server_cpu_s=cpu_s, measured_hit_ratio=None, hits_by_tier={},
        cache_errors={}, warm_status="-", single_connection_p50_ms=p50_ms,
    )  # fmt: skip


def test_triton_ratios_miss_cpu_and_redis_latency_targets() -> None:
    checks = {c.target: c for c in check([
        # simple: ours 1000 req/s at 1 ms CPU each; Triton 1500 req/s at 0.5 ms each.
        _peer_measurement("simple", 1.0, 1000.0, 10.0),
        _peer_measurement("simple", 1.0, 1500.0, 7.5, server="triton"),
        _peer_measurement("densenet_onnx", 1.0, 900.0, 9.0),
        _peer_measurement("densenet_onnx", 1.0, 300.0, 9.0, server="triton"),
        _peer_measurement("simple", 0.0, 1000.0, 10.0, cache="none"),
        _peer_measurement("simple", 0.0, 950.0, 10.4),  # +9.5% CPU per request
        _peer_measurement("simple", 0.0, 800.0, 10.4, cache="redis"),  # +30%
        _peer_measurement("simple", 1.0, 900.0, 9.0, cache="redis", p50_ms=1.25),
    ])}  # fmt: skip

    # By wrk only: the HTTP rows miss where wrk misses, are not judged where it meets.
    simple = checks[HTTP_SIMPLE]
    assert (simple.met, simple.met_by_cpu) == (False, False)  # 0.67x; by CPU 0.5x
    assert "by wrk 0.67x (1000 vs 1500 req/s; " in simple.measured
    assert "by perf_analyzer not measured" in simple.measured
    densenet = checks[HTTP_DENSENET]
    assert (densenet.met, densenet.met_by_cpu) == (None, None)  # 3x, 3x by CPU: no verdict yet
    assert "by wrk 3.00x (900 vs 300 req/s; by CPU 3.00x" in densenet.measured
    assert checks[GRPC_SIMPLE].measured == "not measured"
    local = checks["simple, 0% hits: local server CPU/request <= 10% over no cache"]
    assert local.met is True
    assert "CPU +9.5%" in local.measured
    redis = checks["simple, 0% hits: redis server CPU/request <= 25% over no cache"]
    assert redis.met is False
    assert "CPU +30.0%" in redis.measured
    tiered = checks["simple, 0% hits: tiered server CPU/request <= 10% over no cache"]
    assert tiered.met is None
    latency = checks[
        "simple, 100% hits: Redis hit p50 within 0.3 ms of a local hit's, 1 connection"
    ]
    assert latency.met is True
    assert "+0.250 ms" in latency.measured


def test_the_http_floor_section_puts_each_simple_hit_beside_the_floor() -> None:
    floor = _peer_measurement("simple", 1.0, 10000.0, cpu_s=4.0, server="floor", cache="none")
    local = _peer_measurement("simple", 1.0, 5500.0, cpu_s=4.0)
    triton = _peer_measurement("simple", 1.0, 7000.0, cpu_s=3.5, server="triton")
    densenet = _peer_measurement("densenet_onnx", 1.0, 300.0, cpu_s=4.0)
    rows = report.floor_rows([local, triton, floor, densenet])
    assert [(row.server, row.cache) for row in rows] == [
        ("bare uvicorn (HTTP floor)", "-"), ("cachefleet", "local"), ("triton", "local"),
    ]  # fmt: skip
    assert [round(row.share, 2) for row in rows] == [1.0, 0.55, 0.7]
    # By CPU: the floor's CPU per request over the server's (0.04 ms vs 0.0727 ms for ours).
    assert round(rows[1].cpu_share, 2) == 0.55
    assert report.floor_rows([local, triton]) == []


def test_admission_decisions_are_read_per_tier_with_unmeasured_tiers_named(tmp_path: Path) -> None:
    page = tmp_path / "metrics"
    page.write_text(
        "# TYPE cachefleet_cache_hits counter\n"
        'cachefleet_cache_hits_total{model="simple",tier="local"} 90\n'
        "# TYPE cachefleet_cache_admitted gauge\n"
        'cachefleet_cache_admitted{model="simple",tier="local",version="1"} 1.0\n'
        'cachefleet_cache_admitted{model="simple",tier="redis",version="1"} 0.0\n'
        'cachefleet_cache_admitted{model="densenet_onnx",tier="local",version="1"} 1.0\n'
        "# TYPE cachefleet_cache_admission_saving_seconds gauge\n"
        'cachefleet_cache_admission_saving_seconds{model="simple",tier="local",version="1"} 2e-5\n'
        'cachefleet_cache_admission_saving_seconds{model="simple",tier="redis",version="1"} -1e-4\n'
    )
    assert server_metrics.read(page.as_uri(), "simple").admission == {
        "local": "admitted", "redis": "skipped",
    }  # fmt: skip
    # Admitted by default but without a measured saving: not measured.
    assert server_metrics.read(page.as_uri(), "densenet_onnx").admission == {
        "local": "not measured"
    }
    # A tier of the scenario's cache mode the server said nothing of, and no tiers without a cache.
    tiered = Scenario("hits", "densenet_onnx", "tiered", 1.0)
    assert admission(tiered, {"local": "admitted"}) == {
        "local": "admitted", "redis": "not measured",
    }  # fmt: skip
    assert admission(Scenario("hits", "simple", "none", 1.0), {}) == {}
    assert admission(Scenario("hits", "simple", "local", 1.0, server="triton"), {}) == {}


def _judged(
    model: str, throughput: float, cpu_s: float, server: str = "cachefleet",
    cache: str = "local", transport: Transport = "http",
) -> Measurement:  # fmt: skip
    return _peer_measurement(
        model, 1.0, throughput, cpu_s, server, cache, generator="perf_analyzer",
        transport=transport,
    )  # fmt: skip


def test_perf_analyzer_judges_beside_wrk_over_http_and_alone_over_grpc() -> None:
    measured = [
        _peer_measurement("simple", 1.0, 8000.0, 4.0),  # wrk: ours 1.14x Triton's
        _peer_measurement("simple", 1.0, 7000.0, 4.0, server="triton"),
        _peer_measurement("simple", 1.0, 10000.0, 4.0, server="floor", cache="none"),
        _judged("simple", 6000.0, 3.0),  # perf_analyzer over HTTP: 0.92x Triton's
        _judged("simple", 5800.0, 3.0, cache="tiered"),
        _judged("simple", 6500.0, 4.0, server="triton"),
        _judged("simple", 9000.0, 3.0, server="floor", cache="none"),
        _judged("simple", 4000.0, 4.0, transport="grpc"),  # gRPC: 0.4x Triton's
        _judged("simple", 10000.0, 5.0, server="triton", transport="grpc"),
        _peer_measurement("densenet_onnx", 1.0, 900.0, 9.0),
        _peer_measurement("densenet_onnx", 1.0, 250.0, 2.5, server="triton"),
        _judged("densenet_onnx", 800.0, 8.0),
        _judged("densenet_onnx", 200.0, 8.0, server="triton"),
    ]
    checks = {c.target: c for c in check(measured)}
    grpc = checks[GRPC_SIMPLE]
    assert (grpc.met, grpc.met_by_cpu) == (True, True)  # 0.4x; by CPU 0.05 / 0.1 ms = 0.5x
    assert grpc.measured.startswith("0.40x (4000 vs 10000 req/s; by CPU 0.50x")
    simple = checks[HTTP_SIMPLE]
    assert (simple.met, simple.met_by_cpu) == (False, True)  # perf_analyzer misses, not wrk
    assert "by wrk 1.14x (8000 vs 7000 req/s;" in simple.measured
    assert "; by perf_analyzer 0.92x (6000 vs 6500 req/s;" in simple.measured
    densenet = checks[HTTP_DENSENET]
    assert (densenet.met, densenet.met_by_cpu) == (True, False)  # 3.6x and 4x; by CPU 1x by wrk
    # The other figures read the wrk rows only: the floor section is wrk's.
    assert [row.throughput for row in report.floor_rows(measured)] == [10000.0, 8000.0, 7000.0]

    rows = report.judge_rows(measured)
    assert [(r.model, r.transport, r.server, r.cache) for r in rows] == [
        ("simple", "HTTP", "cachefleet", "local"),
        ("simple", "HTTP", "cachefleet", "tiered"),
        ("simple", "HTTP", "triton", "local"),
        ("simple", "HTTP", "bare uvicorn (HTTP floor)", "-"),
        ("simple", "gRPC", "cachefleet", "local"),
        ("simple", "gRPC", "triton", "local"),
        ("densenet_onnx", "HTTP", "cachefleet", "local"),
        ("densenet_onnx", "HTTP", "triton", "local"),
    ]  # fmt: skip
    table = report.render_judge_rows(rows)
    assert table[2] == (
        "| simple | HTTP | cachefleet | local | 8000 | 1.14x | 6000 | 0.92x | 0.050 | 1.23x |"
    )
    # No wrk figure for tiered (not measured by wrk here) nor over gRPC (wrk does not speak it).
    assert table[3].startswith("| simple | HTTP | cachefleet | tiered | - | - | 5800 | 0.89x |")
    assert table[6].startswith("| simple | gRPC | cachefleet | local | - | - | 4000 | 0.40x |")
