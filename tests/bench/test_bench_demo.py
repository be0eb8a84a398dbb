"""`cachefleet demo` end to end, and its promise to stop every process it started."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DEMO = [sys.executable, "-P", "-m", "cachefleet.cli.main", "demo"]


def _working_folder(output: str) -> str:
    match = re.search(r"working folder (\S+)", output)
    assert match, output
    return match.group(1)


def _processes_using(folder: str) -> list[str]:
    """Command lines of live processes that mention ``folder`` (servers and Redis do)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if folder in command:
            found.append(command)
    return found


def test_demo_stops_everything_it_started_on_ctrl_c(tmp_path: Path) -> None:
    # Started as from a terminal, where Ctrl-C is heard: a process that ignores SIGINT passes
    # that on to what it starts (as a shell's background job does), and an earlier test in the
    # same worker may leave it ignored (then the demo ran to its end and exited 0).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        process = subprocess.Popen(
            [*DEMO, "--duration", "30", "--models", "simple", "--output", str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    assert process.stdout is not None
    seen = []
    deadline = time.monotonic() + 120
    for line in process.stdout:
        seen.append(line)
        if "cachefleet serve" in line or time.monotonic() > deadline:
            break
    folder = _working_folder("".join(seen))
    assert _processes_using(folder), "the demo should be running a server now"

    os.kill(process.pid, signal.SIGINT)
    # Generous: each process it started gets SIGINT, then SIGTERM, then SIGKILL, a few seconds
    # apart, and a loaded machine stretches them; an interrupt it missed would instead run the
    # demo to its end and exit 0, which the return code below refuses.
    rest, _ = process.communicate(timeout=120)
    assert process.returncode == 130, "".join(seen) + rest
    assert "interrupted" in rest
    assert _processes_using(folder) == []


def test_demo_prints_no_cache_and_cache_figures_and_cleans_up_even_without_wrk(
    tmp_path: Path,
) -> None:
    """A bare ``pip install`` machine may lack wrk: the demo must still work, print both
    figures, write its report and chart, and stop what it started. One run checks it all: the
    demo's own part (its plan, table, report, chart, clean-up) is the same with either load
    generator, and ``cachefleet bench --quick`` (test_bench_harness.py) runs that harness under
    wrk."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("redis-server", "taskset"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    output_dir = tmp_path / "out"
    command = [
        *DEMO, "--duration", "1", "--connections", "2", "--models", "simple",
        "--output", str(output_dir),
    ]  # fmt: skip
    completed = subprocess.run(
        command, capture_output=True, text=True, timeout=180, check=False,
        env={**os.environ, "PATH": str(bin_dir)},
    )  # fmt: skip
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "wrk is not installed" in completed.stdout
    assert "Python http.client" in completed.stdout
    assert "Install wrk" in completed.stdout  # and why its figures read lower than the README's
    rows = [line.split() for line in completed.stdout.splitlines() if line.startswith("simple ")]
    assert [row[1] for row in rows] == [
        "none",
        "tiered" if shutil.which("redis-server") else "local",
    ]
    assert rows[0][-1] == "1.0x"
    assert (output_dir / "demo.md").exists()
    assert (output_dir / "demo.png").stat().st_size > 0, output  # the chart, not "no chart"
    assert _processes_using(_working_folder(output)) == []
