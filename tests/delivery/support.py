"""Helpers for the delivery checks: where things are, the real helm binary, object lookup.

helm comes from ``scripts/get-helm`` (into ``.cache/tools/bin``) or from PATH. Without it the
chart tests skip on a developer machine; under CI every skip fails (``support/ci_skips.py``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "cachefleet"
TOOLS = REPO / ".cache" / "tools" / "bin"
HERE = Path(__file__).resolve().parent
#: The release every test renders: the names and namespace deploy/ is rendered with.
RELEASE, NAMESPACE = "cachefleet", "cachefleet-system"

Manifest = dict[str, Any]


def require_tool(name: str, hint: str) -> str:
    """The tool's path; skips the test without it (a failure under CI: ``support.ci_skips``).

    Looked for in the repository's tool cache, beside the running Python (tools that come
    as Python packages), then on PATH.
    """
    for folder in (TOOLS, Path(sys.executable).parent):
        if (folder / name).is_file():
            return str(folder / name)
    found = shutil.which(name)
    if found:
        return found
    pytest.skip(f"{name} not found in {TOOLS}, the virtualenv or on PATH: {hint}")


def load_all(text: str) -> list[Manifest]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@dataclass(frozen=True)
class Helm:
    """The real helm binary, run on the chart of this repository."""

    binary: str

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *args], capture_output=True, text=True, check=False, timeout=120
        )

    def template(self, *values_files: Path) -> list[Manifest]:
        """Every object the chart renders with these values files, CRDs included."""
        args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--include-crds"]
        for path in values_files:
            args += ["--values", str(path)]
        result = self.run(*args)
        assert result.returncode == 0, result.stderr
        return load_all(result.stdout)


def find(objects: list[Manifest], kind: str, name: str | None = None) -> Iterator[Manifest]:
    """The objects of one kind (and name), in render order."""
    for obj in objects:
        if obj["kind"] == kind and (name is None or obj["metadata"]["name"] == name):
            yield obj


def only(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    matches = list(find(objects, kind, name))
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {len(matches)}"
    return matches[0]
