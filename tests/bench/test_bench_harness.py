"""`cachefleet bench --quick` end to end: real servers, Redis and wrk; files with every row.

Speed is never asserted: the run only has to complete and write what it promises.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cachefleet.bench.report import scenario_cells
from cachefleet.bench.scenarios import QUICK_SWEEP, build_plan

pytestmark = pytest.mark.slow


def test_quick_run_writes_a_table_with_every_scenario_and_a_chart(tmp_path: Path) -> None:
    command = [
        sys.executable, "-P", "-m", "cachefleet.cli.main", "bench", "--quick",
        "--duration", "1", "--connections", "4", "--output", str(tmp_path), "--name", "smoke",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False)
    assert completed.returncode == 0, completed.stdout + completed.stderr

    table = (tmp_path / "smoke.md").read_text()
    for scenario in build_plan(models=["simple"], sweep=QUICK_SWEEP, peer=False):
        row = "| " + " | ".join(scenario_cells(scenario)) + " |"
        assert row in table, f"no row for {scenario.label}"
    assert "## Targets" in table
    assert (tmp_path / "smoke.png").read_bytes().startswith(b"\x89PNG")
    assert "wrote" in completed.stdout
