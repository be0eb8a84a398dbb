"""``cachefleet bench --upstream --quick`` against real Triton, as a user runs it: it starts the
Tritons and the fronts, measures every figure and writes the report, with each mechanism seen at
work in the servers' own counters (hits through cachefleet never computed by Triton, the fleet's
replicas answering from the Redis they share).

Needs the Triton peer's venv (``bash scripts/setup-bench-peer``): a step of its own in CI, beside
``tests/triton_upstream/`` (``bash scripts/test-triton-upstream`` installs the venv and runs both);
``scripts/test`` leaves this module out, as it does those.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cachefleet.bench import triton_peer, wrk

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.skipif(
        not (REPO / triton_peer.default_python()).exists(),
        reason="the Triton peer is not installed (bash scripts/setup-bench-peer)",
    ),
    pytest.mark.skipif(not wrk.available(), reason="wrk is not installed"),
]


def _rows(report: str, heading: str) -> list[list[str]]:
    """The cells of each row of the table under ``heading``."""
    section = report.split(heading, 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")][1:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_the_quick_run_writes_every_figure_from_real_triton(tmp_path: Path) -> None:
    command = [sys.executable, "-P", "-m", "cachefleet.cli.main", "bench", "--upstream",
               "--quick", "--output", str(tmp_path), "--name", "upstream"]  # fmt: skip
    completed = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "PYTHONSAFEPATH": "1"},
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    report = (tmp_path / "upstream.md").read_text()
    assert "Failed scenarios" not in report
    assert "Command: `cachefleet bench --upstream --quick" in report

    hits = _rows(report, "## (a)")
    sides = [(row[1].split()[0], row[3]) for row in hits]
    assert ("wrk", "Triton alone") in sides
    assert ("wrk", "cachefleet -> Triton") in sides
    for row in hits:
        # Every request a hit, by the server's own counters; perf_analyzer's first one misses
        # (it sends its own input, never warmed).
        if row[1].startswith("wrk"):
            assert row[4] == "100.0%", row
        assert float(row[4].rstrip("%")) > 90, row
        assert row[-1] == "0", row  # no HTTP error
    misses = _rows(report, "## (b)")
    assert [row[3] for row in misses] == ["Triton alone", "cachefleet -> Triton"] * 2
    assert all(row[4] in ("-", "0.0%") for row in misses)

    ours, theirs = _rows(report, "## (c)")
    assert ours[0].startswith("2 cachefleet replicas")
    assert theirs[0] == "2 Tritons, a local cache each"
    assert ours[1] == theirs[1]  # the same fixed workload, all of it sent to both
    assert ours[2] == theirs[2]
    assert "redis" in ours[7]  # a replica answered from the Redis the fleet shares
    assert ours[-1] == theirs[-1] == "0"
