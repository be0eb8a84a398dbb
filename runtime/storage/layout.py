"""Where downloaded files go in the model repository the server reads.

A storage URI may name any of three things, told apart by what was downloaded:

- a Triton-layout **repository** (``<model>/config.pbtxt``, ``<model>/<version>/model.onnx``):
  its entries become the repository's; it must hold a folder named after the model;
- a single **model folder** (``config.pbtxt`` or numbered version folders at its top): it is
  placed under the model's name;
- a single **ONNX file**: it becomes version 1 of the model (``<model>/1/model.onnx``; the
  server derives the configuration from the graph).
"""

from __future__ import annotations

import shutil
from pathlib import Path


class LayoutError(ValueError):
    """What was downloaded is not a model repository for the model asked for."""


def arrange(staging: Path, model_name: str) -> Path:
    """Rearrange ``staging`` in place into a repository holding ``model_name``; its folder."""
    entries = [p for p in staging.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_file() and entries[0].suffix == ".onnx":
        version = staging / model_name / "1"
        version.mkdir(parents=True)
        entries[0].rename(version / "model.onnx")
    elif _is_model_folder(entries):
        inner = staging / f".{model_name}.moving"
        inner.mkdir()
        for entry in entries:
            entry.rename(inner / entry.name)
        inner.rename(staging / model_name)
    model = staging / model_name
    if not model.is_dir():
        found = ", ".join(sorted(p.name for p in entries)) or "nothing"
        raise LayoutError(
            f"the download holds no model folder {model_name!r} (found: {found}); point the URI "
            "at a Triton-layout repository, a model folder or an .onnx file"
        )
    return model


def move_into(staging: Path, destination: Path) -> None:
    """Move the arranged repository's entries into ``destination`` (emptied of old entries
    of the same names: a re-run after a partial move)."""
    for entry in staging.iterdir():
        target = destination / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        entry.rename(target)


def _is_model_folder(entries: list[Path]) -> bool:
    return any(
        (p.is_file() and p.name == "config.pbtxt") or (p.is_dir() and p.name.isdigit())
        for p in entries
    )
