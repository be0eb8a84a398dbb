"""The Markdown report of the upstream run: conditions, then figures (a), (b) and (c).

Each row of (a) and (b) through cachefleet sits beside Triton alone on the same model, by the
same generator and concurrency, with its throughput as a share of Triton's and Triton's server
CPU per request as a share of the hop's (cachefleet's and Triton's together).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from cachefleet.bench.measure import Measurement
from cachefleet.bench.report import machine_line
from cachefleet.bench.upstream.fleet import FleetResult, Workload
from cachefleet.bench.upstream.plan import SECTION_TITLES, SIDE_NAMES, Pins, UpstreamScenario

Row = tuple[UpstreamScenario, Measurement]


@dataclass
class Record:
    """Everything the report needs: the conditions of the run and what was measured."""

    command: str
    started: datetime
    pins: Pins
    duration_s: float
    warmup_s: float
    probe_s: float
    connections: int
    replicas: int
    workload: Workload
    fleet_s: float
    #: 1-minute load average at the start and the end.
    load_average: tuple[float, float]
    rows: list[Row] = field(default_factory=list)
    fleets: list[FleetResult] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_SIDE_COLUMNS = (
    "model", "generator", "conns", "side", "hit ratio (server)", "req/s", "p50 ms", "p99 ms",
    "p50 ms, 1 conn", "cachefleet CPU ms/req", "Triton CPU ms/req", "server CPU ms/req",
    "of Triton alone, req/s", "of Triton alone, by CPU", "errors",
)  # fmt: skip
_FLEET_COLUMNS = (
    "fleet", "requests", "distinct inputs", "computed upstream", "per distinct input",
    "upstream executions", "hit ratio (servers)", "hits by tier", "req/s",
    "p99 ms (worst server)", "server CPU ms/req", "errors",
)  # fmt: skip


def render(record: Record) -> str:
    workload = record.workload
    lines = [
        f"# cachefleet in front of Triton, {record.started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{record.command}`",
        "",
        f"- {machine_line()}",
        f"- Load average (1 min) at start / end: {record.load_average[0]:.2f} / "
        f"{record.load_average[1]:.2f}",
        f"- CPU pinning (taskset): {record.pins.description}",
        f"- (a), (b): {record.duration_s:g} s per scenario after a {record.warmup_s:g} s "
        f"unmeasured warm-up, {record.connections} connections; wrk -t2 with hits cycling "
        "through 16 warmed inputs and misses unique inputs, perf_analyzer over gRPC "
        f"(`-i grpc --concurrency-range {record.connections}`) sending its own input (its "
        "first request misses, every later one hits); p50 ms, 1 conn: a "
        f"{record.probe_s:g} s run with one connection after each hit scenario, and the "
        "1-connection miss rows",
        "- Server CPU ms/req: utime+stime of each server's process tree (/proc/PID/stat) over "
        "the measured window, over the requests served; through cachefleet, cachefleet's and "
        "Triton's side by side and summed",
        "- cachefleet in front: `cachefleet serve --upstream grpc://TRITON --cache local` "
        "(hits: in front of the Triton with its local cache; misses: in front of the Triton "
        "without one, with `--cache-all-models`, as that Triton reports response_cache off)",
        f"- (c): each of the {record.replicas} servers of a fleet was sent its own "
        f"{workload.draws} Zipf draws (exponent {workload.exponent:g}) over "
        f"{workload.distinct} distinct inputs of simple, each once, by "
        f"{max(1, record.connections // record.replicas)} Python senders (processes, "
        "http.client), all servers at once, from cold caches; both fleets were sent the same "
        "requests. Each replica's local tier (`--local-cache-size 375000`) and each Triton's "
        "local cache (128 KiB) holds about 500 of simple's answers (750 bytes an entry in "
        "cachefleet's tier, 256 in Triton's)",
        *[f"- Note: {note}" for note in record.notes],
    ]
    for section, title in SECTION_TITLES.items():
        rows = [row for row in record.rows if row[0].section == section]
        if rows:
            lines += ["", f"## {title}", "", *_table(_SIDE_COLUMNS)]
            lines += [_side_row(row, record.rows, record.connections) for row in rows]
    if record.fleets:
        lines += [
            "", "## (c) A fleet on a skewed workload", "", *_table(_FLEET_COLUMNS),
            *(_fleet_row(result) for result in record.fleets), "", FLEET_TEXT,
        ]  # fmt: skip
        if not all(result.complete for result in record.fleets):
            lines += ["", "**A fleet did not get every request sent in the time allowed.**"]
    if record.failures:
        lines += ["", "## Failed scenarios", ""]
        lines += [f"- {label}: {reason}" for label, reason in record.failures]
    return "\n".join(lines) + "\n"


FLEET_TEXT = (
    "Computed upstream and upstream executions are Triton's own statistics (`inference_count` "
    "and `execution_count` of `/v2/models/simple/stats`, summed over the Tritons that execute: "
    "requests its cache answered are in neither, and its dynamic batcher may run several "
    "requests in one execution); per distinct input: computed upstream over the distinct "
    "inputs the fleet was sent (1.00: each computed once; the replicas' fleet coalescing, "
    "`--cache-fleet-coalescing auto`, leaves a model whose measured compute time is under "
    "`--cache-fleet-min-compute`, 5 ms by default, to compute once per replica, so two "
    "replicas missing one input at the same moment may both forward it); the hit ratio is the "
    "servers' own counters (cachefleet's hits of both tiers and requests coalesced onto one in "
    "flight; Triton's `nv_cache_num_hits_per_model` and misses); p99 is the worst of the "
    "servers' generators (an upper bound on the p99 of all requests together); server CPU is "
    "every process of the fleet (replicas, Redis and the Triton behind them; or the Tritons). "
    "On two cores, with every server of a fleet on one core, this is a functional figure (what "
    "each fleet computes, and how often it hits) more than a speed one. The nvidia-pytriton "
    "wheel ships only Triton's local cache (`tritonserver/caches/local`): Triton's Redis cache "
    "is a separate build, not in the wheel, so no fleet of Tritons sharing Redis is measured."
)


def _table(columns: Sequence[str]) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def _side_row(row: Row, rows: Sequence[Row], connections: int) -> str:
    scenario, m = row
    load = m.load
    triton = _triton_beside(scenario, rows)
    front_cpu = m.cpu_ms_per_request if scenario.side == "front" else None
    upstream_cpu = (
        m.upstream_cpu_ms_per_request if scenario.side == "front" else m.cpu_ms_per_request
    )
    total = m.cpu_ms_per_request + (m.upstream_cpu_ms_per_request or 0.0)
    share = by_cpu = "-"
    if triton is not None and scenario.side == "front":
        tm = triton[1]
        if tm.load.throughput > 0:
            share = f"{load.throughput / tm.load.throughput:.2f}x"
        if total > 0:
            by_cpu = f"{tm.cpu_ms_per_request / total:.2f}x"
    ratio = m.measured_hit_ratio
    cells = [
        scenario.model, f"{scenario.generator} ({scenario.transport})",
        str(scenario.connections or connections), SIDE_NAMES[scenario.side],
        "-" if ratio is None else f"{ratio:.1%}", _rate(load.throughput),
        f"{load.p50_ms:.2f}", f"{load.p99_ms:.2f}",
        "-" if m.single_connection_p50_ms is None else f"{m.single_connection_p50_ms:.2f}",
        _ms(front_cpu), _ms(upstream_cpu), f"{total:.3f}", share, by_cpu, str(load.errors),
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _triton_beside(scenario: UpstreamScenario, rows: Sequence[Row]) -> Row | None:
    """Triton alone on the front row's model, section, generator and concurrency."""
    for row in rows:
        other = row[0]
        if other.side == "triton" and (
            other.section,
            other.model,
            other.generator,
            other.connections,
        ) == (scenario.section, scenario.model, scenario.generator, scenario.connections):
            return row
    return None


def _fleet_row(result: FleetResult) -> str:
    counters = result.counters
    ratio = counters.hit_ratio
    per_input = counters.computed / result.distinct if result.distinct else 0.0
    tiers = ", ".join(f"{t} {v:.0f}" for t, v in sorted(counters.hits_by_tier.items())) or "-"
    cells = [
        result.fleet, str(result.requests), str(result.distinct), f"{counters.computed:.0f}",
        f"{per_input:.2f}", f"{counters.executions:.0f}",
        "-" if ratio is None else f"{ratio:.1%}", tiers, _rate(result.throughput),
        f"{result.p99_ms:.2f}", f"{result.cpu_ms_per_request:.3f}", str(result.errors),
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |"


def _rate(value: float) -> str:
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def write_report(record: Record, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text(render(record))
    return path
