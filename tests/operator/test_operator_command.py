"""`cachefleet operator` takes kopf run's options, as the Helm chart passes them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cachefleet.cli.main import build_parser
from cachefleet.operator.operator_command import kopf_arguments

MANIFESTS = Path(__file__).resolve().parents[2] / "operator" / "manifests"
IMPURE = {"kopf", "kubernetes", "redis", "urllib3", "socket", "subprocess", "secrets", "random"}


def kopf_argv(*argv: str) -> list[str]:
    return kopf_arguments(build_parser().parse_args(["operator", *argv]))


def test_chart_command_line_reaches_kopf_run() -> None:
    argv = kopf_argv("--liveness=http://0.0.0.0:8080/healthz", "--all-namespaces")
    assert argv[:3] == ["run", "-m", "cachefleet.operator.handlers"]
    assert "--all-namespaces" in argv
    assert "--liveness=http://0.0.0.0:8080/healthz" in argv


def test_namespaces_repeat_and_exclude_all_namespaces() -> None:
    argv = kopf_argv("--namespace", "a", "-n", "b", "--standalone", "-v")
    assert argv[3:] == ["--namespace", "a", "--namespace", "b", "--standalone", "--verbose"]
    with pytest.raises(SystemExit):
        kopf_argv("-A", "-n", "a")


def test_manifest_builders_import_no_clients_or_io() -> None:
    for module in MANIFESTS.glob("*.py"):
        tree = ast.parse(module.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in IMPURE, f"{module.name} imports {name}"
