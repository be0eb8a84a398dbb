"""Load from Triton's ``perf_analyzer``: the generator every Triton user already runs.

``scripts/get-perf-analyzer`` installs it (``.cache/tools/bin/perf_analyzer``). It sends its own
inputs: random data made once and reused, so after its first request every request is the same
and, with a cache, a hit. It cannot send a unique miss per request, so it measures the 100%-hit
scenarios only; the harness gives the others to the Python senders (:func:`runner`).

perf_analyzer also reads the server's statistics extension before and after each window and
prints its server-side section (cache hits and misses, the latency split): :func:`run` keeps that
section in :attr:`LoadResult.server_report` for the report to show.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.pinning import pinned

#: Where scripts/get-perf-analyzer puts its launcher, relative to the checkout.
_CACHED = Path(".cache/tools/bin/perf_analyzer")
NAME = "perf_analyzer"


def executable() -> str | None:
    """perf_analyzer on PATH, else the one scripts/get-perf-analyzer cached, else None."""
    found = shutil.which(NAME)
    if found is not None:
        return found
    return str(_CACHED.resolve()) if _CACHED.is_file() else None


def available() -> bool:
    return executable() is not None


def command(model: str, address: str, protocol: str, concurrency: int, window_ms: int) -> list[str]:
    """The perf_analyzer command line a Triton user would type, for one concurrency.

    ``--stability-percentage 100``: on a shared machine throughput moves by more than the
    default 10% between windows, and perf_analyzer would then give up after ten windows.
    """
    found = executable()
    if found is None:
        raise BenchError("perf_analyzer is not installed (bash scripts/get-perf-analyzer)")
    return [
        found, "-m", model, "-u", address, "-i", protocol,
        "--concurrency-range", str(concurrency),
        "--measurement-interval", str(window_ms),
        "--stability-percentage", "100",
    ]  # fmt: skip


def run_command(arguments: list[str], cpus: str | None, timeout_s: float) -> LoadResult:
    """Run one perf_analyzer command; raises :class:`BenchError` when it fails.

    perf_analyzer at times never returns, spinning on its core with every thread busy (seen
    against the bare-uvicorn floor, which went on answering other clients, and once against our
    server): such a run is killed after ``timeout_s`` and tried once more, and a second one is a
    failed scenario, not the end of the bench."""
    command = pinned(arguments, cpus)
    try:
        completed = _finished(command, timeout_s)
    except subprocess.TimeoutExpired:  # spinning: once more
        try:
            completed = _finished(command, timeout_s)
        except subprocess.TimeoutExpired:
            raise BenchError(
                f"perf_analyzer did not finish within {timeout_s:g} s, twice"
            ) from None
    return parse_output(completed.stdout, completed.stderr, completed.returncode)


def _finished(command: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``command`` run to its end, or killed after ``timeout_s`` (TimeoutExpired)."""
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)


def run(spec: LoadSpec, protocol: str = "http") -> LoadResult:
    """Load ``spec.requests.model`` at ``spec.base_url`` with ``spec.connections`` concurrent
    requests; perf_analyzer's three stable windows together last about ``spec.duration_s``."""
    address = urlsplit(spec.base_url).netloc or spec.base_url
    window_ms = max(200, round(spec.duration_s * 1000 / 3))
    arguments = command(spec.requests.model, address, protocol, spec.connections, window_ms)
    return run_command(arguments, spec.cpus, timeout_s=spec.duration_s * 6 + 60)


def runner(fallback: Callable[[LoadSpec], LoadResult]) -> Callable[[LoadSpec], LoadResult]:
    """perf_analyzer for 100%-hit loads, ``fallback`` for the loads that need unique misses."""

    def load(spec: LoadSpec) -> LoadResult:
        if spec.hit_ratio < 1.0:
            return fallback(spec)
        return run(spec)

    return load


_NUMBER = r"([0-9]+(?:\.[0-9]+)?)"


def parse_output(stdout: str, stderr: str, returncode: int) -> LoadResult:
    """The client figures of perf_analyzer's report, with its server-side section."""
    client, _, server = stdout.partition("  Server: \n")
    found = {
        name: re.search(pattern, client)
        for name, pattern in (
            ("requests", r"Request count: ([0-9]+)"),
            ("throughput", rf"Throughput: {_NUMBER} infer/sec"),
            ("p50", rf"p50 latency: {_NUMBER} usec"),
            ("p90", rf"p90 latency: {_NUMBER} usec"),
            ("p99", rf"p99 latency: {_NUMBER} usec"),
        )
    }
    if returncode != 0 or any(match is None for match in found.values()):
        last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
        raise BenchError(
            f"perf_analyzer failed (exit {returncode}): {last}\n{stdout[-2000:]}\n{stderr[-2000:]}"
        )
    value = {name: float(match.group(1)) for name, match in found.items() if match is not None}
    requests = int(value["requests"])
    section = server.split("\nInferences/Second vs.")[0].rstrip()
    return LoadResult(
        requests=requests,
        duration_s=requests / value["throughput"] if value["throughput"] > 0 else 0.0,
        errors=0,  # perf_analyzer stops with an error status at the first failed request
        p50_ms=value["p50"] / 1000,
        p90_ms=value["p90"] / 1000,
        p99_ms=value["p99"] / 1000,
        generator=NAME,
        server_report="Server:\n" + section if section else "",
    )
