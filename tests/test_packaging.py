"""The wheel carries every package folder (setuptools only ships the packages it is told of), and
nothing of the repository's harness, tests or recorded results."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for package, folder in config["package-dir"].items():
        found.add(package)
        for init in (ROOT / folder).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((package, *relative)))
    assert found == listed


def test_operator_folder_cannot_shadow_the_standard_library() -> None:
    """A regular package named "operator" in the repository root would shadow the stdlib module
    for any Python started there with the current folder on sys.path (python -m venv, -m pytest)."""
    assert not (ROOT / "operator" / "__init__.py").exists()


#: Folders of the repository a wheel build reads; the rest (tests, harness, results) must not ship.
SOURCES = ("pyproject.toml", "README.md", "cli", "runtime", "operator", "bench", "harness", "tests")


def test_the_wheel_carries_the_product_and_no_harness_tests_or_results(tmp_path: Path) -> None:
    """Built from a copy of the sources (a build in place would reuse a stale build/ folder)."""
    source = tmp_path / "source"
    source.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.onnx")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "wheel"), str(source)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    (wheel,) = (tmp_path / "wheel").glob("cachefleet-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("cachefleet-")}
    assert tops == {"cachefleet"}
    assert "cachefleet/bench/bench_command.py" in names
    assert "cachefleet/bench/infer.lua" in names
    assert not [name for name in names if "/results/" in name or name.endswith((".md", ".png"))]
    for moved in ("operator_scale", "kube_emulator", "cache_micro"):
        assert f"cachefleet/bench/{moved}.py" not in names
    # The chaos run is the harness's (harness/chaos/); the peers' launchers and scripts stay.
    assert not [name for name in names if "chaos" in name]
    for peer in ("peer", "triton_peer", "triton_peer_model", "kserve_peer_model"):
        assert f"cachefleet/bench/{peer}.py" in names
