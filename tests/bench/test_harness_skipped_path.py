"""The skipped-path harness runs, and reaches what it measures: every tier skipped."""

from __future__ import annotations

import pytest

from harness import skipped_path


def test_it_measures_a_model_whose_tier_is_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    code = skipped_path.main(
        ["--modes", "none", "local", "--warmup", "600", "--batch", "50", "--rounds", "1"]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("none ")
    assert "local skipped" in lines[1]
    assert "over none" in lines[1]
    assert lines[2].startswith("local ")
    assert "get_or_compute beyond the compute" in lines[2]
