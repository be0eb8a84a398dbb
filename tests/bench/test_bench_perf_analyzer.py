"""Triton's own perf_analyzer against a real server: its server-side section shows our cache hits.

perf_analyzer reads the statistics extension before and after each window and reports the model
version whose counts grew; with Triton's semantics (every request in ``queue``, cache hits
included) it finds ours and prints the hits, misses and the latency split.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from support.processes import ServerProcess

from cachefleet.bench import harness, perf_analyzer
from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.scenarios import Scenario, Transport

pytestmark = pytest.mark.skipif(
    not perf_analyzer.available(),
    reason="perf_analyzer is not installed (bash scripts/get-perf-analyzer)",
)


def _server_figures(section: str) -> dict[str, int]:
    names = ("Inference count", "Execution count", "Cache hit count", "Cache miss count",
             "Successful request count")  # fmt: skip
    figures = {}
    for name in names:
        match = re.search(rf"{name}: ([0-9]+)", section)
        assert match is not None, f"no {name!r} in perf_analyzer's server section:\n{section}"
        figures[name] = int(match.group(1))
    return figures


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_server_section_shows_our_cache_hits(
    server: ServerProcess, protocol: Transport
) -> None:
    """Through the bench's judged scenarios (``--judge``): perf_analyzer over their transport,
    whatever ``--load`` asks for, three 500 ms windows at concurrency 2."""
    address = server.url if protocol == "http" else server.grpc_url
    scenario = Scenario("judge", "simple", "local", 1.0, transport=protocol)
    load = harness.load_runner(harness.BenchOptions(generator="wrk"), scenario)
    requests = RequestSet(
        model="simple", encoding="binary", path="/v2/models/simple/infer", headers={},
        hit_bodies=(b"",), miss_prefix=b"", miss_suffix=b"", slot_format="dec",
    )  # fmt: skip
    measured = load(LoadSpec(address, requests, connections=2, duration_s=1.5, hit_ratio=1.0,
                             nonce=1))  # fmt: skip
    assert measured.generator == "perf_analyzer"

    assert measured.requests > 0
    assert measured.throughput > 0
    figures = _server_figures(measured.server_report)
    served = figures["Successful request count"]
    assert served > 0, measured.server_report
    # perf_analyzer repeats one random input: its first concurrent requests may miss (at most one
    # per connection, before the first answer is cached), every later one hits.
    assert figures["Cache miss count"] <= 2 < figures["Cache hit count"], measured.server_report
    assert figures["Cache hit count"] + figures["Cache miss count"] == served, (
        measured.server_report
    )
    # Two first misses of the same input may share one execution (single-flight coalescing).
    assert figures["Execution count"] == figures["Inference count"]
    executions, misses = figures["Execution count"], figures["Cache miss count"]
    assert executions <= misses, measured.server_report
    assert (executions == 0) == (misses == 0), measured.server_report
    assert "Average Cache Hit Latency" in measured.server_report


def test_the_bench_runner_measures_hits_and_leaves_misses_to_the_fallback(
    server: ServerProcess,
) -> None:
    requests = RequestSet(
        model="simple", encoding="json", path="/v2/models/simple/infer", headers={},
        hit_bodies=(b"{}",), miss_prefix=b"", miss_suffix=b"", slot_format="dec",
    )  # fmt: skip
    fallen_back: list[LoadSpec] = []

    def fallback(spec: LoadSpec) -> LoadResult:
        fallen_back.append(spec)
        return LoadResult(1, 1.0, 0, 1.0, 1.0, 1.0, "fallback")

    load = perf_analyzer.runner(fallback)
    spec = LoadSpec(server.base_url, requests, connections=2, duration_s=1.5, hit_ratio=1.0,
                    nonce=1)  # fmt: skip
    result = load(spec)
    assert result.generator == "perf_analyzer"
    assert result.requests > 0
    assert not fallen_back
    assert 0 < result.p50_ms <= result.p90_ms <= result.p99_ms
    half = LoadSpec(server.base_url, requests, connections=2, duration_s=1.5, hit_ratio=0.5,
                    nonce=1)  # fmt: skip
    assert load(half).generator == "fallback"
    assert fallen_back == [half]


def test_a_run_that_never_returns_is_killed_and_tried_once_more(tmp_path: Path) -> None:
    """perf_analyzer at times spins without end: the first such run is killed and the command
    run again; the second run's own outcome is the answer (here: a failure it reports)."""
    marker = tmp_path / "ran-once"
    script = tmp_path / "perf_analyzer"
    script.write_text(
        f"#!/bin/sh\nif [ ! -e {marker} ]; then touch {marker}; exec sleep 30; fi\n"
        "echo 'error: the second run fails on its own' >&2\nexit 3\n"
    )
    script.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(BenchError, match="the second run fails on its own"):
        perf_analyzer.run_command([str(script)], None, timeout_s=1)
    assert time.monotonic() - started < 10


def test_two_runs_that_never_return_are_a_failed_scenario() -> None:
    started = time.monotonic()
    with pytest.raises(BenchError, match=r"did not finish within 0\.5 s, twice"):
        perf_analyzer.run_command(["sleep", "30"], None, timeout_s=0.5)
    assert time.monotonic() - started < 10
