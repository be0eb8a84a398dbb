"""Declared dependencies: every third-party module a part imports is declared for that part, and
each image's extra is enough to run its commands without the other image's dependencies."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
#: What each folder may use: the base dependencies plus these extras.
PARTS = {
    "cli": [],
    "runtime": ["runtime", "cpu", "gpu"],
    "operator": ["operator"],
    "bench": ["bench"],
    # The repository's harness (not in the wheel) runs with the development install.
    "harness": ["bench", "dev"],
}
#: Files that run in another environment: the KServe and Triton peers' models run in the peers'
#: own venvs (scripts/setup-bench-peer), with kserve, nvidia-pytriton and onnxruntime installed
#: there.
ELSEWHERE = {REPO / "bench" / "kserve_peer_model.py", REPO / "bench" / "triton_peer_model.py"}


def distribution(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match is not None, requirement
    return match.group(0).lower().replace("_", "-")


def declared(extras: list[str]) -> set[str]:
    """Distributions from the base dependencies and ``extras``, self-references followed."""
    names = {distribution(r) for r in PROJECT["dependencies"]}
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for requirement in PROJECT["optional-dependencies"][extra]:
            own = re.fullmatch(r"cachefleet\[([a-z,]+)\]", requirement)
            if own:
                pending += own.group(1).split(",")
            else:
                names.add(distribution(requirement))
    return names


def third_party_imports(folder: Path) -> set[str]:
    modules: set[str] = set()
    for path in set(folder.rglob("*.py")) - ELSEWHERE:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    own = {"cachefleet", folder.name}  # the package, and the harness importing itself
    if folder.name == "harness":  # plane_scale.py starts the cluster tests' plane (tests/support)
        own.add("support")
    stdlib = sys.stdlib_module_names | {"_typeshed"}  # the stdlib's stubs, for type checking only
    return {m for m in modules if m not in stdlib and m not in own}


@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_import_is_declared_for_its_part(part: str) -> None:
    providers = packages_distributions()
    allowed = declared(PARTS[part])
    undeclared = {}
    for module in sorted(third_party_imports(REPO / part)):
        dists = {name.lower().replace("_", "-") for name in providers.get(module, [module])}
        if not dists & allowed:
            undeclared[module] = sorted(dists)
    assert undeclared == {}, f"{part}/ imports modules no dependency of its extras provides"


def test_the_images_extras_do_not_overlap() -> None:
    """The operator image carries nothing of the server, and the server nothing of kopf."""
    runtime, operator = declared(["runtime", "gpu"]), declared(["operator"])
    base = declared([])
    # Both talk to Redis, and both export Prometheus metrics.
    assert not (runtime & operator) - base - {"redis", "prometheus-client"}
    assert {"kopf", "kubernetes"}.isdisjoint(runtime)
    assert {"fastapi", "onnx", "numpy", "uvicorn", "onnxruntime-gpu"}.isdisjoint(operator)


#: Run a command with the other image's modules made unimportable, as in that image.
BLOCKED_RUN = """
import sys
from importlib.abc import MetaPathFinder

BLOCKED = set(sys.argv[1].split(","))

class Absent(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in this image)")
        return None

sys.meta_path.insert(0, Absent())
sys.argv = ["cachefleet", *sys.argv[2:]]
from cachefleet.cli.main import main
sys.exit(main())
"""
SERVER_ONLY = "fastapi,starlette,uvicorn,numpy,onnx,onnxruntime,orjson,prometheus_client,blake3"
OPERATOR_ONLY = "kopf,kubernetes,urllib3"


def run_without(blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-P", "-c", BLOCKED_RUN, blocked, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_operator_commands_run_without_the_server_dependencies() -> None:
    result = run_without(SERVER_ONLY, "render", str(REPO / "examples" / "simple-cpu.yaml"))
    assert result.returncode == 0, result.stderr
    assert "kind: Deployment" in result.stdout
    result = run_without(SERVER_ONLY, "operator", "--help")
    assert result.returncode == 0, result.stderr


def test_operator_without_its_extra_says_what_to_install_in_one_line() -> None:
    result = run_without(OPERATOR_ONLY, "operator", "-A")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "cachefleet operator: kopf is not installed; the operator needs the operator extra: "
        "pip install 'cachefleet[operator]'"
    ]
    assert "operator" in PROJECT["optional-dependencies"]  # the extra the line names


def test_the_operator_command_checks_every_module_of_its_extra() -> None:
    from cachefleet.operator.operator_command import EXTRA_MODULES

    own = declared(["operator"]) - declared([])
    providers = packages_distributions()
    modules = {m for m, dists in providers.items() if own & {distribution(d) for d in dists}}
    assert set(EXTRA_MODULES) == {m for m in modules if not m.startswith("_")}


def test_server_commands_run_without_the_operator_dependencies(tmp_path: Path) -> None:
    result = run_without(OPERATOR_ONLY, "samples", str(tmp_path / "models"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "models" / "simple" / "config.pbtxt").is_file()
    result = run_without(OPERATOR_ONLY, "serve", "--help")
    assert result.returncode == 0, result.stderr


def test_render_runs_with_the_readme_install_alone() -> None:
    """The README calls `render` "no cluster needed" after an install without the operator extra:
    it builds the manifests (redis.conf with jinja2, a base dependency) without kopf or a client."""
    result = run_without(OPERATOR_ONLY, "render", str(REPO / "examples" / "simple-cpu.yaml"))
    assert result.returncode == 0, result.stderr
    assert "kind: Deployment" in result.stdout
    assert "jinja2" in declared([])


def test_the_readme_first_command_installs_what_the_demo_draws_with() -> None:
    """The README's first command runs `cachefleet demo`, which leaves a chart: the extras that
    command installs must bring the models' runtime and matplotlib."""
    readme = (REPO / "README.md").read_text()
    first = next(line for line in readme.splitlines() if "cachefleet demo" in line)
    match = re.search(r"pip install -e '\.\[([a-z,]+)\]'", first)
    assert match, first
    installed = declared(match.group(1).split(","))
    assert {"matplotlib", "onnxruntime"} <= installed
