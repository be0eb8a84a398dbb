"""The package's wheel, built once per test run and shared by the tests that read it.

It is built as the image's wheel stage builds it: from a folder holding what that stage's COPY
lines copy (so a folder or file the build needs and the Dockerfile does not copy fails the
build), with the repository's other sources (the harness, the tests) beside them as in a
checkout (so the wheel shows that the package configuration leaves them out). Building takes
most of a minute on a busy machine, so the first test worker to need it builds it under a file
lock in the run's shared temporary folder, and the others read that one. Modules take the
``product_wheel`` fixture with ``pytest_plugins = ("support.wheel",)``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.dockerfile import REPO, parse_stages

#: Sources of the repository that are not the product: present in a checkout, never shipped.
NOT_SHIPPED = ("harness", "tests")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.onnx")


def wheel_context(context: Path) -> Path:
    """Fill ``context`` with what the wheel stage copies, plus ``NOT_SHIPPED`` beside it."""
    (wheel,) = (stage for stage in parse_stages() if stage.name == "wheel")
    for copy in wheel.values("COPY"):
        *sources, target = copy.split()
        destination = context / target
        for source in sources:
            origin = REPO / source.rstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, destination, ignore=SKIP)
            else:
                destination.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, destination / origin.name)
    for name in NOT_SHIPPED:
        shutil.copytree(REPO / name, context / name, ignore=SKIP)
    return context


def built_wheel(folder: Path) -> Path:
    """The wheel, built into ``folder`` by the first caller (across processes) and reused.

    ``--no-build-isolation`` builds with the development environment's setuptools instead of
    fetching the build requirements from the package index for a build of its own; what the
    wheel holds is decided by ``pyproject.toml`` and the sources, which are the same.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wheels = folder / "wheels"
        found = sorted(wheels.glob("cachefleet-*.whl"))
        if found:
            return found[0]
        shutil.rmtree(folder / "context", ignore_errors=True)  # a failed build's, if any
        context = wheel_context(folder / "context")
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
             "--wheel-dir", str(wheels), "."],
            cwd=context, capture_output=True, text=True, check=False, timeout=300,
        )  # fmt: skip
        assert result.returncode == 0, result.stdout + result.stderr
        (wheel,) = wheels.glob("cachefleet-*.whl")
        return wheel


@pytest.fixture(scope="session")
def product_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, one build per run: under xdist the workers' temporary folders share a parent
    (each run its own), which is where it goes; a run without workers keeps it in its own."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    return built_wheel(shared / "product-wheel")
