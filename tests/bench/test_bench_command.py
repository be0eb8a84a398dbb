"""`cachefleet bench`'s parser: the chaos run left it for the repository's harness."""

from __future__ import annotations

import pytest

from cachefleet.cli.main import build_parser


def test_chaos_says_where_the_chaos_run_is_now(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["bench", "--chaos", "--redis-mode", "cluster"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "bash scripts/harness chaos" in error
    assert "unrecognized" not in error


def test_chaos_is_not_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    assert "chaos" not in capsys.readouterr().out
