"""The PNG chart of a run: throughput and p99 latency per scenario, coloured by cache mode.

matplotlib is optional (the demo must run from a bare install): :func:`available` says whether
a chart can be drawn, and callers say so when it cannot.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from cachefleet.bench.measure import Measurement

_COLOURS = {
    "none": "#8c8c8c",
    "local": "#1f77b4",
    "redis": "#d62728",
    "tiered": "#2ca02c",
    "redis-cluster": "#9467bd",
    "tiered-cluster": "#17becf",
}
_PEER_COLOUR = "#ff7f0e"
#: The HTTP floor (a bare uvicorn app with a canned answer): not a cache mode.
_FLOOR_COLOUR = "#000000"


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def draw(measurements: Sequence[Measurement], path: Path, title: str) -> Path:
    """Two side-by-side horizontal bar panels (log scale): req/s and p99 ms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [m.scenario.label for m in measurements]
    colours = [
        _PEER_COLOUR
        if m.scenario.server == "kserve"
        else _FLOOR_COLOUR
        if m.scenario.server == "floor"
        else _COLOURS.get(m.scenario.cache, "k")
        for m in measurements
    ]
    positions = list(range(len(measurements)))[::-1]
    height = max(3.0, 0.26 * len(measurements) + 1.2)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, height), sharey=True)
    panels = (
        (left, [m.load.throughput for m in measurements], "throughput, req/s (log)"),
        (right, [m.load.p99_ms for m in measurements], "p99 latency, ms (log)"),
    )
    for axis, values, xlabel in panels:
        axis.barh(positions, values, color=colours)
        axis.set_xscale("log")
        positive = [value for value in values if value > 0]
        if positive:
            axis.set_xlim(min(positive) / 2, max(positive) * 3)
        axis.set_xlabel(xlabel)
        axis.grid(axis="x", which="both", alpha=0.3)
        for position, value in zip(positions, values, strict=True):
            text = f"{value:,.1f}" if value < 100 else f"{value:,.0f}"
            axis.annotate(
                text, (value, position), xytext=(3, 0), textcoords="offset points",
                va="center", fontsize=7,
            )  # fmt: skip
    left.set_yticks(positions, labels, fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path
