"""`cachefleet demo`: samples, server and load on one machine: no cache vs cache.

The README's first command. It writes the sample models to a temporary folder, starts a
throwaway Redis (when ``redis-server`` is installed), runs the server without a cache and then
with the tiered cache under the same repeated load, and prints the figures side by side. Every
process it starts is stopped on the way out, also on Ctrl-C, SIGTERM and errors.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachefleet.bench.harness import RunRecord

HELP = "samples, server and load on one machine: no cache vs cache."
DEMO_MODELS = ("densenet_onnx", "simple")
_TITLE = "cachefleet demo: the same repeated requests without a cache and with one"
#: Why the demo's figures are lower without wrk: the generator, not the server, is the limit.
PYTHON_LOAD_NOTE = (
    "wrk is not installed: loading with Python http.client processes. They spend more CPU per "
    "request than a cache hit costs the server, so on a small machine they, not the server, "
    "set a hit's rate, and the speed-up below reads lower than the README's (measured with wrk, "
    "the server pinned to its own core). Install wrk (apt install wrk) for those figures."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per load (5)")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections (8)")
    parser.add_argument(
        "--models", nargs="+", default=list(DEMO_MODELS), help="models to load (both samples)"
    )
    parser.add_argument(
        "--output", type=Path, default=Path("cachefleet-demo"),
        help="folder for the table (.md) and the chart (.png) (default ./cachefleet-demo)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from cachefleet.bench import chart, harness, pinning, report, wrk
    from cachefleet.bench.errors import BenchError
    from cachefleet.bench.scenarios import Scenario

    cache = "tiered" if shutil.which("redis-server") else "local"
    if cache == "local":
        print("redis-server is not installed: showing the in-process (local) tier only.")
    if not wrk.available():
        print(PYTHON_LOAD_NOTE)
    options = harness.BenchOptions(
        connections=args.connections,
        duration_s=args.duration,
        warmup_s=1.0,
        probe_s=0.0,
        cpus=pinning.plan(),
    )
    plan = [Scenario("hits", model, mode, 1.0) for model in args.models for mode in ("none", cache)]
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        record = harness.run_plan(plan, options, lambda line: print(line, flush=True))
    except BenchError as error:
        print(f"cachefleet demo: {error!s}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("cachefleet demo: interrupted; every process it started has been stopped.")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print()
    print(_table(record, cache))
    markdown = report.write(record, "cachefleet demo", args.output, "demo")
    print(f"\nfull table: {markdown}")
    if not chart.available():
        print("no chart: matplotlib is not installed (pip install 'cachefleet[demo]')")
    elif record.measurements:
        print(f"chart: {chart.draw(record.measurements, args.output / 'demo.png', _TITLE)}")
    return 0 if not record.failures else 1


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM takes the same way out as Ctrl-C, so the ExitStacks stop every process."""
    raise KeyboardInterrupt


def _table(record: RunRecord, cache: str) -> str:
    lines = [
        f"{'model':<15}{'cache':<8}{'req/s':>10}{'p50 ms':>10}{'p99 ms':>10}{'speed-up':>10}",
    ]
    baseline = {
        m.scenario.model: m.load.throughput
        for m in record.measurements
        if m.scenario.cache == "none"
    }
    for m in record.measurements:
        base = baseline.get(m.scenario.model, 0.0)
        speedup = f"{m.load.throughput / base:.1f}x" if base else "-"
        lines.append(
            f"{m.scenario.model:<15}{m.scenario.cache:<8}{m.load.throughput:>10.0f}"
            f"{m.load.p50_ms:>10.2f}{m.load.p99_ms:>10.2f}{speedup:>10}"
        )
    for failure in record.failures:
        lines.append(f"{failure.scenario.label}: failed: {failure.reason}")
    lines.append(
        f"(repeated requests, {record.generator_name}, {record.options.duration_s:g} s each; "
        f"{cache} = in-process LRU" + (" in front of Redis)" if cache == "tiered" else ")")
    )
    return "\n".join(lines)
