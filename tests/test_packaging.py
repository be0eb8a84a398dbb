"""The wheel carries every package folder: setuptools only ships the packages it is told of."""

from __future__ import annotations

import tomllib
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
