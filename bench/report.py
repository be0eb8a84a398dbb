"""The Markdown report of a run: conditions, targets, and one table per scenario group."""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

from cachefleet.bench.harness import RunRecord
from cachefleet.bench.measure import Measurement
from cachefleet.bench.scenarios import GROUP_TITLES, Scenario
from cachefleet.bench.targets import check

_COLUMNS = (
    "model", "body", "server", "cache", "hit ratio asked", "measured", "req/s",
    "p50 ms", "p90 ms", "p99 ms", "p50 ms, 1 conn", "server CPU ms/req", "HTTP errors",
    "cache errors",
)  # fmt: skip


def render(record: RunRecord, command: str) -> str:
    options = record.options
    lines = [
        f"# cachefleet benchmark, {record.started:%Y-%m-%d %H:%M} UTC, {record.machine}",
        "",
        f"Command: `{command}`",
        "",
        f"- Machine: {_cpu_model()}, {len(_cpus())} CPUs, Python {platform.python_version()}, "
        f"onnxruntime {_version('onnxruntime')}",
        f"- Load: {record.generator_name}, {options.duration_s:g} s per scenario after a "
        f"{options.warmup_s:g} s unmeasured warm-up; hits cycle through 16 warmed inputs, "
        "misses are unique inputs",
        f"- CPU pinning (taskset): {options.cpus.description}",
        "- Server CPU ms/req: utime+stime of the server process tree (/proc/PID/stat) over the "
        "measured window, divided by the requests served",
        "- Measured hit ratio: from the server's own cache counters (/metrics): hits plus "
        "requests coalesced onto an identical one in flight, over those plus misses",
        f"- p50 ms, 1 conn: a {options.probe_s:g} s run with one connection after each "
        "100%-hit scenario, the latency of one request without queueing",
        f"- Load average (1 min) at start / end: {record.load_average[0]:.2f} / "
        f"{record.load_average[1]:.2f}; other work on the machine lowers req/s far more than "
        "it changes server CPU ms/req",
        *(
            ["- Profiling: py-spy sampled the server at 200 Hz (non-blocking) while measuring"]
            if options.profile
            else []
        ),
        *[f"- Note: {note}" for note in record.notes],
        "",
        "## Targets",
        "",
        "| target | measured | met (as stated) | met (by server CPU/req) |",
        "|---|---|---|---|",
    ]
    for target in check(record.measurements):
        lines.append(
            f"| {target.target} | {target.measured} | {_verdict(target.met)} "
            f"| {_verdict(target.met_by_cpu)} |"
        )
    for group, title in GROUP_TITLES.items():
        rows = [m for m in record.measurements if m.scenario.group == group]
        if rows:
            lines += ["", f"## {title}", "", _header(), _rule(), *(_row(m) for m in rows)]
    profiled = [m for m in record.measurements if m.profile]
    if profiled:
        lines += [
            "", "## Where the server's time goes (py-spy, share of samples)", "",
            "| scenario | layers |", "|---|---|",
        ]  # fmt: skip
        for m in profiled:
            shares = ", ".join(f"{layer} {share:.0%}" for layer, share in m.profile.items())
            lines.append(f"| {m.scenario.label} | {shares} |")
    reported = [m for m in record.measurements if m.load.server_report]
    if reported:
        lines += [
            "",
            "## perf_analyzer's server-side sections (our statistics, read by Triton's tool)",
        ]
        for m in reported:
            lines += ["", f"{m.scenario.label}:", "", "```", m.load.server_report, "```"]
    if record.failures:
        lines += ["", "## Failed scenarios", ""]
        lines += [f"- {f.scenario.label}: {f.reason}" for f in record.failures]
    return "\n".join(lines) + "\n"


def write(record: RunRecord, command: str, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(render(record, command))
    return path


def scenario_cells(scenario: Scenario) -> list[str]:
    return [
        scenario.model, scenario.body, scenario.server,
        scenario.cache if scenario.server != "kserve" else "-", f"{scenario.hit_ratio:.0%}",
    ]  # fmt: skip


def _verdict(met: bool | None) -> str:
    return "n/a" if met is None else ("yes" if met else "**no**")


def _header() -> str:
    return "| " + " | ".join(_COLUMNS) + " |"


def _rule() -> str:
    return "|" + "---|" * len(_COLUMNS)


def _row(measurement: Measurement) -> str:
    load = measurement.load
    measured = measurement.measured_hit_ratio
    single = measurement.single_connection_p50_ms
    cells = [
        *scenario_cells(measurement.scenario),
        "-" if measured is None else f"{measured:.1%}",
        f"{load.throughput:.0f}" if load.throughput >= 100 else f"{load.throughput:.1f}",
        f"{load.p50_ms:.2f}", f"{load.p90_ms:.2f}", f"{load.p99_ms:.2f}",
        "-" if single is None else f"{single:.2f}",
        f"{measurement.cpu_ms_per_request:.3f}", str(load.errors),
        ", ".join(f"{k} {v:.0f}" for k, v in sorted(measurement.cache_errors.items())) or "-",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpus() -> set[int]:
    return os.sched_getaffinity(0)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"
