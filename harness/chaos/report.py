"""The figures of a chaos run, and the Markdown table that shows them."""

from __future__ import annotations

import collections
import statistics
from dataclasses import dataclass

from harness.chaos.control import STEADY
from harness.chaos.faults import FaultLog


@dataclass
class ChaosReport:
    """The figures of a run (targets: failed 0, wrong 0)."""

    duration_s: float
    clients: int
    servers: int
    sent: int
    failed: int
    wrong: int
    max_latency_s: float
    p99_latency_s: float
    #: the longest request that started in each phase (phases without a slow one are left out)
    stalls_s: dict[str, float]
    statuses: dict[str, int]
    resume_s: list[float | None]
    #: ``cachefleet_cache_errors_total`` by kind, summed over the servers (corrupt: refused).
    cache_errors: dict[str, float]
    faults: FaultLog
    examples: list[str]
    #: standalone (one Redis killed, paused, filled) or cluster (one shard at a time)
    topology: str = "standalone"


def _resume(values: list[float | None], events: str) -> str:
    """Worst and median of the resume times, and how many never saw hits again."""
    resumed = [r for r in values if r is not None]
    if not resumed:
        return "never"
    text = (
        f"{max(resumed):.2f} s (worst of {len(values)}{' ' + events if events else ''}"
        f", median {statistics.median(resumed):.2f} s)"
    )
    if len(resumed) < len(values):
        text += f"; {len(values) - len(resumed)} of them never saw hits again"
    return text


def render_table(report: ChaosReport) -> str:
    """The report as a Markdown table (the README's Reliability section shows one)."""
    after = report.faults.resume_after
    if report.topology == "standalone" or len(after) != len(report.resume_s):
        events = "restarts" if report.topology == "standalone" else "faults"
        resume = _resume(report.resume_s, events)
    else:
        resume = "; ".join(
            f"after {what}: "
            + _resume([r for r, w in zip(report.resume_s, after, strict=True) if w == what], "")
            for what in dict.fromkeys(after)
        )
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(report.statuses.items()))
    errors = ", ".join(f"{k} {v:.0f}" for k, v in sorted(report.cache_errors.items()))
    phases = [STEADY] + [p for _, p, _ in sorted(report.faults.events) if p != STEADY]
    stalls = ", ".join(
        f"{phase} {report.stalls_s[phase] * 1000:.0f} ms"
        for phase in dict.fromkeys(phases)
        if phase in report.stalls_s
    )
    faults = collections.Counter(
        f"{phase}: {what}" for _, phase, what in report.faults.events if phase != STEADY
    )
    rows = [
        ("requests sent", f"{report.sent} ({statuses})"),
        ("failed (target 0)", str(report.failed)),
        ("wrong answers (target 0)", str(report.wrong)),
        ("longest stall (max latency)", f"{report.max_latency_s * 1000:.0f} ms"),
        ("longest stall by phase", stalls),
        ("p99 latency", f"{report.p99_latency_s * 1000:.1f} ms"),
        (
            "Redis hits resume after restart"
            if report.topology == "standalone"
            else "Redis hits on the struck shard's keys resume after the fault",
            resume,
        ),
        ("planted entries written / refused by the servers",
         f"{report.faults.planted} / {report.cache_errors.get('corrupt', 0):.0f}"),
        ("cache errors counted by the servers", errors),
        ("faults", "; ".join(f"{what} x{n}" for what, n in sorted(faults.items()))),
    ]  # fmt: skip
    lines = ["| measure | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in rows]
    return "\n".join(lines)
