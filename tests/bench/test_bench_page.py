"""Which runs of `cachefleet bench` remake the docs site's benchmark page, and what it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachefleet.bench import bench_command, report
from cachefleet.cli.main import build_parser

REPORT = """# cachefleet benchmark, 2026-11-23 03:54 UTC, 2cpu-x86_64

Command: `cachefleet bench`

## Targets

| target | measured | met (as stated) | met (by server CPU/req) |
|---|---|---|---|
"""


def page_for(*argv: str) -> Path | None:
    return bench_command._docs_page(build_parser().parse_args(["bench", *argv]))


@pytest.fixture
def in_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.usefixtures("in_repository")
def test_a_full_run_in_the_repository_remakes_the_site_page() -> None:
    assert page_for() == Path("docs/benchmarks.md")
    assert page_for("--profile", "--name", "2026-11-23-0354-2cpu-x86_64") == report.DOCS_PAGE


@pytest.mark.usefixtures("in_repository")
def test_smoke_runs_and_runs_written_elsewhere_leave_it_alone(tmp_path: Path) -> None:
    assert page_for("--quick") is None
    assert page_for("--output", str(tmp_path / "elsewhere")) is None
    assert page_for("--quick", "--docs-page", "x.md") == Path("x.md")


def test_the_page_names_its_report_and_holds_it_under_its_own_heading(tmp_path: Path) -> None:
    source = tmp_path / "bench" / "results" / "run.md"
    source.parent.mkdir(parents=True)
    source.write_text(REPORT)
    page = report.write_docs_page(source, tmp_path / "docs" / "benchmarks.md").read_text()
    assert report.page_source(page) == source.as_posix()
    assert page.count("\n# ") == 1
    assert "\n## cachefleet benchmark, 2026-11-23 03:54 UTC, 2cpu-x86_64\n" in page
    assert "\n### Targets\n" in page
