"""The Markdown report of a run: conditions, targets, and one table per scenario group.

The report goes to ``bench/results/`` (the history of every run stays there), and the docs
site's benchmark page is made from the latest one: ``docs_page`` wraps a report, and
``python -m cachefleet.bench.report REPORT`` remakes the page from a report already written.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cachefleet.bench.harness import RunRecord
from cachefleet.bench.measure import Measurement
from cachefleet.bench.scenarios import FLOOR_MODEL, GROUP_TITLES, Scenario
from cachefleet.bench.targets import PERF_ANALYZER, WRK, check, judged

_COLUMNS = (
    "model", "body", "server", "cache", "hit ratio asked", "measured", "req/s",
    "p50 ms", "p90 ms", "p99 ms", "p50 ms, 1 conn", "server CPU ms/req", "HTTP errors",
    "cache errors", "cache admission",
)  # fmt: skip
#: What the report calls the HTTP floor's server.
FLOOR_NAME = "bare uvicorn"
FLOOR_TITLE = f"HTTP floor: {FLOOR_NAME}"
JUDGE_TITLE = "Measured by perf_analyzer"
JUDGE_TEXT = (
    "The 100%-hit scenarios measured again by Triton's own load generator, perf_analyzer, with "
    "the same concurrency and pinning, right after wrk (`--judge`): over HTTP beside wrk's "
    "figures, and over gRPC (`-i grpc`) against each server's gRPC port. Each figure is a share "
    "of Triton's by the same generator over the same transport; by CPU, Triton's server CPU per "
    "request over the server's. perf_analyzer sends its own input (random, made once), so its "
    "first requests miss and every later one hits."
)


def render(record: RunRecord, command: str) -> str:
    options = record.options
    lines = [
        f"# cachefleet benchmark, {record.started:%Y-%m-%d %H:%M} UTC, {record.machine}",
        "",
        f"Command: `{command}`",
        "",
        f"- {machine_line()}",
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
        "- Cache admission: `--cache-admission "
        f"{options.cache_admission or 'auto'}`"
        f"{'' if options.cache_admission else ' (the server default)'}; the last column "
        "is the server's decision per tier for the scenario's model at the end of the measured "
        "window (cachefleet_cache_admitted in /metrics): admitted, skipped (neither looked up "
        "nor inserted into, but for a small probe sample), or not measured (admitted by "
        "default: no lookup of the tier, or no computed answer of the model, on this server "
        "yet; e.g. answers another mode's server left in the shared Redis)",
        f"- Load average (1 min) at start / end: {record.load_average[0]:.2f} / "
        f"{record.load_average[1]:.2f}; other work on the machine lowers req/s far more than "
        "it changes server CPU ms/req",
        *(
            ["- Profiling: py-spy sampled the server at 200 Hz (non-blocking) while measuring"]
            if options.profile
            else []
        ),
        *[f"- Note: {note}" for note in record.notes],
    ]
    lines += _targets(record.measurements)
    for group, title in GROUP_TITLES.items():
        rows = [m for m in record.measurements if m.scenario.group == group]
        if rows:
            lines += ["", f"## {title}", "", _header(), _rule(), *(_row(m) for m in rows)]
    floor = floor_rows(record.measurements)
    if floor:
        lines += [
            "", f"## {FLOOR_TITLE}", "",
            "A bare ASGI app on uvicorn (uvloop, httptools, no access log, no proxy-headers "
            "middleware, as `cachefleet serve` runs it) that reads each request's whole body "
            "with `receive()` and answers `POST /v2/models/{m}/infer` with the bytes our server "
            "answered the same request with (captured in this run, headers included), and "
            "nothing else: the most any server on uvicorn reaches for this request on the same "
            "core, under the same load. Each server's 100%-hit throughput of the model as a "
            "share of it, and the floor's server CPU per request as a share of the server's:",
            "",
            "| model | server | cache | req/s | of the floor | server CPU ms/req "
            "| of the floor, by CPU |",
            "|---|---|---|---|---|---|---|",
            *(
                f"| {row.model} | {row.server} | {row.cache} | {row.throughput:.0f} "
                f"| {row.share:.2f}x | {row.cpu_ms:.3f} | {row.cpu_share:.2f}x |"
                for row in floor
            ),
        ]  # fmt: skip
    judge = judge_rows(record.measurements)
    if judge:
        lines += ["", f"## {JUDGE_TITLE}", "", JUDGE_TEXT, "", *render_judge_rows(judge)]
    profiled = [m for m in record.measurements if m.profile]
    if profiled:
        lines += [
            "", "## Where the server's time goes (py-spy, share of samples)", "",
            "| scenario | layers |", "|---|---|",
        ]  # fmt: skip
        for m in profiled:
            shares = ", ".join(f"{layer} {share:.0%}" for layer, share in m.profile.items())
            lines.append(f"| {m.scenario.label} | {shares} |")
    # The floor's statistics are canned: perf_analyzer sees them never move.
    reported = [
        m for m in record.measurements if m.load.server_report and m.scenario.server != "floor"
    ]
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


def _targets(measurements: Sequence[Measurement]) -> list[str]:
    """The targets this run measured; the others are named in one line, not as rows of "not
    measured" (a demo or a focused run measures two or three of them)."""
    checks = check(measurements)
    measured = [t for t in checks if t.met is not None or t.met_by_cpu is not None]
    lines = ["", "## Targets", ""]
    if measured:
        lines += [
            "| target | measured | met (as stated) | met (by server CPU/req) |",
            "|---|---|---|---|",
            *(
                f"| {t.target} | {t.measured} | {_verdict(t.met)} | {_verdict(t.met_by_cpu)} |"
                for t in measured
            ),
        ]
    skipped = len(checks) - len(measured)
    if skipped:
        lines += [
            "",
            f"{skipped} of the {len(checks)} targets need scenarios this run did not include "
            "(`cachefleet bench` with no options runs them all).",
        ]
    return lines


def write(record: RunRecord, command: str, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(render(record, command))
    return path


#: The docs site's benchmark page, from the repository root.
DOCS_PAGE = Path("docs/benchmarks.md")
_SOURCE = re.compile(r"^<!-- generated by cachefleet bench from (\S+); do not edit -->$", re.M)


def docs_page(report: str, source: str) -> str:
    """The docs site's benchmark page: how to read it, then the report at ``source``, its
    headings moved one level down under the page's own."""
    body = re.sub(r"^(#+) ", r"#\1 ", report.strip(), flags=re.M)
    return "\n".join([
        f"<!-- generated by cachefleet bench from {source}; do not edit -->",
        "# Benchmarks",
        "",
        "The latest run of `cachefleet bench`, written by the harness itself: every figure below "
        f"is in `{source}`, and earlier runs, with what each one showed, are kept beside it in "
        "`bench/results/` (`bench/results/history.md` tells their story). How the harness "
        "measures, its peers (KServe's Python server, Triton with its local response cache) and "
        "its other runs (`--batching`, `--identity`, perf_analyzer, and the chaos run) are in "
        "[The benchmark harness](development/benchmarking.md).",
        "",
        "Read server CPU ms/req first: req/s and latency move with whatever else the machine "
        "runs, the CPU time a request costs the server hardly does. Benchmarks are never timed "
        "tests: no test asserts a speed.",
        "",
        "Reports made since the HTTP floor and the admission column were added also have a "
        "section *HTTP floor: bare uvicorn* (a bare uvicorn app answering each floor "
        "model's request with the bytes our server answers it with: each server's 100%-hit "
        "rate of the model as a share of what any server on uvicorn reaches there) and, in "
        "every table, the column "
        "*cache admission*: per tier of the scenario's cache mode, whether the server used it "
        "for the model at the end of the measured window (admitted), skipped it as costing more "
        "than it saves (skipped), or had not measured it yet (not measured); see "
        "[the harness's page](development/benchmarking.md#cache-admission-in-the-report).",
        "",
        body,
        "",
    ])  # fmt: skip


def write_docs_page(report_path: Path, page: Path = DOCS_PAGE) -> Path:
    """Remake ``page`` from the report at ``report_path`` (as the repository names it)."""
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(docs_page(report_path.read_text(), report_path.as_posix()))
    return page


def page_source(page: str) -> str | None:
    """The report a benchmark page was made from, as its first line names it."""
    found = _SOURCE.search(page)
    return found.group(1) if found else None


def scenario_cells(scenario: Scenario) -> list[str]:
    server = f"{FLOOR_NAME} (HTTP floor)" if scenario.server == "floor" else scenario.server
    return [
        scenario.model, scenario.body, server,
        scenario.cache if scenario.server in ("cachefleet", "triton") else "-",
        f"{scenario.hit_ratio:.0%}",
    ]  # fmt: skip


@dataclass(frozen=True)
class FloorRow:
    """One server's 100%-hit figures of a model beside the HTTP floor's for that model."""

    server: str
    cache: str
    throughput: float
    #: Throughput over the floor's.
    share: float
    cpu_ms: float
    #: The floor's server CPU per request over this server's (1.0: as cheap as the floor).
    cpu_share: float
    model: str = FLOOR_MODEL


def floor_rows(measurements: Sequence[Measurement]) -> list[FloorRow]:
    """Per model the floor answered, the floor first, then each server's 100%-hit binary HTTP
    row of that model; empty when the floor was not measured (or served nothing)."""
    found: list[FloorRow] = []
    floors = [m for m in measurements if m.scenario.server == "floor" and m.load.throughput > 0]
    for floor in floors:
        if floor.scenario.group != "hits":
            continue
        rows = [
            m
            for m in measurements
            if m.scenario.group == "hits"
            and m.scenario.model == floor.scenario.model
            and m.scenario.encoding == "binary"
            and m.scenario.server != "floor"
        ]
        found += [
            FloorRow(
                server=scenario_cells(m.scenario)[2],
                cache=scenario_cells(m.scenario)[3],
                throughput=m.load.throughput,
                share=m.load.throughput / floor.load.throughput,
                cpu_ms=m.cpu_ms_per_request,
                cpu_share=(
                    floor.cpu_ms_per_request / m.cpu_ms_per_request if m.cpu_ms_per_request else 0
                ),
                model=floor.scenario.model,
            )
            for m in [floor, *rows]
        ]
    return found


@dataclass(frozen=True)
class JudgeRow:
    """One server's 100%-hit figures by perf_analyzer (and wrk over HTTP) beside Triton's."""

    model: str
    transport: str
    server: str
    cache: str
    #: Throughput by wrk and its share of Triton's by wrk (None: not measured by wrk).
    wrk: float | None
    wrk_share: float | None
    throughput: float
    #: Throughput by perf_analyzer over Triton's by perf_analyzer (None: no Triton figure).
    share: float | None
    cpu_ms: float
    #: Triton's server CPU per request over this server's (None: no Triton figure).
    cpu_share: float | None


def judge_rows(measurements: Sequence[Measurement]) -> list[JudgeRow]:
    """Every 100%-hit row perf_analyzer measured, in run order, each with the same server's
    wrk figure and both as shares of Triton's."""
    rows = []
    for m in measurements:
        s = m.scenario
        if s.group not in ("hits", "judge") or m.load.generator != PERF_ANALYZER:
            continue
        if s.encoding != "binary":
            continue
        wrk = judged(measurements, s.model, s.transport, WRK, s.server, s.cache)
        triton = judged(measurements, s.model, s.transport, PERF_ANALYZER, "triton")
        triton_wrk = judged(measurements, s.model, s.transport, WRK, "triton")
        cells = scenario_cells(s)
        rows.append(
            JudgeRow(
                model=s.model,
                transport="gRPC" if s.transport == "grpc" else "HTTP",
                server=cells[2],
                cache=cells[3],
                wrk=wrk.load.throughput if wrk else None,
                wrk_share=_share(wrk, triton_wrk),
                throughput=m.load.throughput,
                share=_share(m, triton),
                cpu_ms=m.cpu_ms_per_request,
                cpu_share=(
                    triton.cpu_ms_per_request / m.cpu_ms_per_request
                    if triton is not None and m.cpu_ms_per_request > 0
                    else None
                ),
            )
        )
    return rows


def render_judge_rows(rows: Sequence[JudgeRow]) -> list[str]:
    """The Markdown table of :func:`judge_rows`."""

    def number(value: float | None, form: str) -> str:
        return "-" if value is None else format(value, form)

    def share(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}x"

    return [
        "| model | transport | server | cache | req/s by wrk | of Triton, wrk "
        "| req/s by perf_analyzer | of Triton, perf_analyzer | server CPU ms/req "
        "| of Triton, by CPU |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *(
            f"| {r.model} | {r.transport} | {r.server} | {r.cache} | {number(r.wrk, '.0f')} "
            f"| {share(r.wrk_share)} | {r.throughput:.0f} | {share(r.share)} | {r.cpu_ms:.3f} "
            f"| {share(r.cpu_share)} |"
            for r in rows
        ),
    ]


def _share(ours: Measurement | None, triton: Measurement | None) -> float | None:
    if ours is None or triton is None or triton.load.throughput <= 0:
        return None
    return ours.load.throughput / triton.load.throughput


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
        ", ".join(f"{tier} {state}" for tier, state in measurement.admission.items()) or "-",
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def machine_line() -> str:
    """What the machine is, for a report's conditions: CPU model and count, Python, onnxruntime."""
    return (
        f"Machine: {_cpu_model()}, {len(_cpus())} CPUs, Python {platform.python_version()}, "
        f"onnxruntime {_version('onnxruntime')}"
    )


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Remake the docs site's benchmark page.")
    parser.add_argument("report", type=Path, help="a report in bench/results/")
    parser.add_argument("--page", type=Path, default=DOCS_PAGE, help=f"default {DOCS_PAGE}")
    args = parser.parse_args(argv)
    print(f"wrote {write_docs_page(args.report, args.page)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
