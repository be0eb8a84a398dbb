"""Where fetched files land: object keys never leave the target folder, and a repository, a model
folder or a bare .onnx file each become a repository holding the model."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from cachefleet.runtime.storage.layout import LayoutError, arrange
from cachefleet.runtime.storage.paths import UnsafeKeyError, inside, relative_key


@pytest.mark.parametrize(
    ("key", "prefix", "relative"),
    [
        ("team/repo/simple/config.pbtxt", "team/repo/", "simple/config.pbtxt"),
        ("team/repo//simple/1/model.onnx", "team/repo/", "simple/1/model.onnx"),
        ("model.onnx", "", "model.onnx"),
    ],
)
def test_keys_below_the_prefix(key: str, prefix: str, relative: str) -> None:
    assert relative_key(key, prefix) == PurePosixPath(relative)


@pytest.mark.parametrize(
    "key", ["p/../x", "p/../../etc/passwd", "p/./x", "p/", "p/a\\..\\..\\x", "p/a\0b"]
)
def test_keys_that_would_leave_the_folder_are_refused(key: str) -> None:
    with pytest.raises(UnsafeKeyError):
        relative_key(key, "p/")


def test_a_symlink_inside_cannot_lead_outside(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(tmp_path, root / "link")
    with pytest.raises(UnsafeKeyError):
        inside(root, PurePosixPath("link/escaped.txt"))
    assert inside(root, PurePosixPath("a/b")) == (root / "a" / "b").resolve()


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_a_repository_stays_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "simple" / "1").mkdir(parents=True)
    (tmp_path / "simple" / "1" / "model.onnx").write_bytes(b"onnx")
    (tmp_path / "other" / "1").mkdir(parents=True)
    assert arrange(tmp_path, "simple") == tmp_path / "simple"
    assert files(tmp_path) == {"simple/1/model.onnx"}


def test_a_model_folder_goes_under_the_name(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "simple"')
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(b"onnx")
    arrange(tmp_path, "simple")
    assert files(tmp_path) == {"simple/config.pbtxt", "simple/1/model.onnx"}


def test_a_bare_onnx_file_becomes_version_one(tmp_path: Path) -> None:
    (tmp_path / "densenet.onnx").write_bytes(b"onnx")
    arrange(tmp_path, "densenet_onnx")
    assert files(tmp_path) == {"densenet_onnx/1/model.onnx"}


def test_a_repository_without_the_model_says_what_it_holds(tmp_path: Path) -> None:
    (tmp_path / "other" / "1").mkdir(parents=True)
    with pytest.raises(LayoutError, match=r"no model folder 'simple' \(found: other\)"):
        arrange(tmp_path, "simple")
