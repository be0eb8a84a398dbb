"""`cachefleet bench`'s parser: the chaos run left it for the repository's harness; when
perf_analyzer judges the 100% hits, and where those scenarios go in the plan."""

from __future__ import annotations

import pytest

from cachefleet.bench import bench_command, perf_analyzer
from cachefleet.bench.scenarios import build_plan
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


def _judged(monkeypatch: pytest.MonkeyPatch, installed: bool, *argv: str) -> tuple[str, ...]:
    monkeypatch.setattr(perf_analyzer, "available", lambda: installed)
    args = build_parser().parse_args(["bench", *argv])
    triton = args.triton if args.triton is not None else not args.quick
    return bench_command._judged_transports(args, triton)


def test_perf_analyzer_judges_by_default_where_triton_is_compared_and_it_is_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _judged(monkeypatch, True) == ("http", "grpc")
    assert _judged(monkeypatch, False) == ()
    assert _judged(monkeypatch, True, "--quick") == ()
    assert _judged(monkeypatch, True, "--no-triton") == ()
    assert _judged(monkeypatch, True, "--no-judge") == ()
    assert _judged(monkeypatch, False, "--quick", "--judge") == ("http", "grpc")
    # perf_analyzer as the generator already measures the HTTP hits: it judges gRPC only.
    assert _judged(monkeypatch, True, "--load", "perf_analyzer") == ("grpc",)


def test_the_judged_scenarios_follow_each_models_hits() -> None:
    plan = build_plan(
        models=["simple", "densenet_onnx"], caches=["none", "local", "redis", "tiered"],
        sweep=[], peer=False, triton=True, grpc=False, judge=("http", "grpc"),
    )  # fmt: skip
    labels = [s.label for s in plan if s.model == "simple" and s.hit_ratio == 1.0]
    assert labels == [
        "simple binary none 100%", "simple binary local 100%", "simple binary redis 100%",
        "simple binary tiered 100%", "simple binary triton 100%",
        "simple binary HTTP floor 100%",
        "simple HTTP binary local 100% by perf_analyzer",
        "simple HTTP binary tiered 100% by perf_analyzer",
        "simple HTTP binary triton 100% by perf_analyzer",
        "simple HTTP binary HTTP floor 100% by perf_analyzer",
        "simple gRPC raw local 100% by perf_analyzer",
        "simple gRPC raw tiered 100% by perf_analyzer",
        "simple gRPC raw triton 100% by perf_analyzer",
    ]  # fmt: skip
    densenet = [s.label for s in plan if s.model == "densenet_onnx" and s.group == "judge"]
    assert densenet == [
        "densenet_onnx HTTP binary local 100% by perf_analyzer",
        "densenet_onnx HTTP binary tiered 100% by perf_analyzer",
        "densenet_onnx HTTP binary triton 100% by perf_analyzer",
        "densenet_onnx gRPC raw local 100% by perf_analyzer",
        "densenet_onnx gRPC raw tiered 100% by perf_analyzer",
        "densenet_onnx gRPC raw triton 100% by perf_analyzer",
    ]  # fmt: skip
    assert not [s for s in build_plan(triton=True) if s.group == "judge"]
