"""The batching run's Markdown report: one table per group, comparable rows side by side."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cachefleet.bench.batching.senders import LoadFigures


@dataclass(frozen=True)
class Row:
    group: str
    model: str
    variant: str
    load: LoadFigures
    server_cpu_s: float
    executions: float
    rows_inferred: float

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000 * self.server_cpu_s / self.load.requests if self.load.requests else 0.0

    @property
    def rows_per_execution(self) -> float:
        return self.rows_inferred / self.executions if self.executions else 0.0

    def cells(self) -> list[str]:
        load = self.load
        answers = ", ".join(f"{key} {value}" for key, value in sorted(load.x_cache.items()))
        return [
            self.model, self.variant, f"{load.throughput:.1f}", f"{load.p50_ms:.1f}",
            f"{load.p99_ms:.1f}", f"{self.cpu_ms_per_request:.2f}", f"{self.executions:.0f}",
            f"{self.rows_per_execution:.2f}", str(load.errors), answers,
        ]  # fmt: skip

    def line(self) -> str:
        load = self.load
        return (
            f"{self.model:<20} {self.variant:<34} {load.throughput:8.1f} req/s  "
            f"p50 {load.p50_ms:8.1f} ms  p99 {load.p99_ms:8.1f} ms  "
            f"cpu {self.cpu_ms_per_request:7.2f} ms/req  rows/exec {self.rows_per_execution:5.2f}"
        )


_HEADER = [
    "model", "variant", "req/s", "p50 ms", "p99 ms", "server CPU ms/req", "executions",
    "rows/execution", "errors", "X-Cache",
]  # fmt: skip


def write_report(
    rows: list[Row],
    folder: Path,
    name: str,
    command: str,
    started: datetime,
    load_average: tuple[float, float],
    cpus: str,
) -> Path:
    lines = [
        f"# Batching run, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{command}`. CPUs: {cpus}. 1-minute load average "
        f"{load_average[0]:.2f} at the start, {load_average[1]:.2f} at the end.",
        "Load: Python senders (one process and one keep-alive connection per client, binary",
        "tensors); executions and rows from the server's `nv_inference_exec_count` and",
        "`nv_inference_count`; server CPU from /proc.",
    ]
    for group in dict.fromkeys(row.group for row in rows):
        lines += ["", f"## {group}", "", _table_row(_HEADER), _table_row(["---"] * len(_HEADER))]
        lines += [_table_row(row.cells()) for row in rows if row.group == group]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _table_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"
