"""The wheel carries every package folder (setuptools only ships the packages it is told of), and
nothing of the repository's harness, tests or recorded results."""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
pytest_plugins = ("support.wheel",)  # product_wheel


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


def test_the_wheel_carries_the_product_and_no_harness_tests_or_results(product_wheel: Path) -> None:
    """The wheel the image's wheel stage builds, with the harness and the tests beside its
    sources as in a checkout (``support/wheel.py``: built once a run, fresh from the sources, so
    no stale build/ folder is reused)."""
    wheel = product_wheel
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
