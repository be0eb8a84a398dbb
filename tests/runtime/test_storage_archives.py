"""Unpacking a fetched archive: hostile members (names that climb out, links, the CVE-2025-4517
symlink chain, devices) refuse the whole archive with nothing written anywhere, a plain archive
unpacks, and a bomb stops at the fetch's byte limit. The checks are the project's own, so they
hold on a Python whose ``tarfile`` data filter still has the escapes (3.11 before 3.11.13).
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from cachefleet.runtime.storage.archives import unpack
from cachefleet.runtime.storage.budget import SizeLimitError, WriteBudget
from cachefleet.runtime.storage.paths import UnsafeKeyError

AddMembers = Callable[[tarfile.TarFile, Path], None]
MiB = 1 << 20


def add_file(tar: tarfile.TarFile, name: str, data: bytes = b"x") -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def add_link(tar: tarfile.TarFile, name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    tar.addfile(info)


def add_folder(tar: tarfile.TarFile, name: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, 0o777
    tar.addfile(info)


def add_special(tar: tarfile.TarFile, name: str, kind: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    tar.addfile(info)


def cve_2025_4517(tar: tarfile.TarFile, target: Path) -> None:
    """CPython's own reproduction of the CVE: folders with names long enough that the chain of
    one-letter symlinks to them resolves past PATH_MAX, where ``os.path.realpath`` stops
    expanding (so the data filter's check passes), a symlink up out of the target through the
    chain, a hard link through it to a file outside, that file overwritten through the hard
    link, and a new file created outside."""
    steps = "abcdefghijklmnop"
    path_max = os.pathconf(target.parent, "PC_PATH_MAX")
    long_name = "d" * ((path_max - len(str(target)) - 1) // (len(steps) + 1))
    path = ""
    for step in steps:
        add_folder(tar, f"{path}{long_name}")
        add_link(tar, f"{path}{step}", long_name)
        path = f"{path}{long_name}/"
    chain = "/".join([*steps, "l" * 254])
    add_link(tar, chain, "/".join([".."] * len(steps)))
    add_link(tar, "escape", f"{chain}/..")
    add_link(tar, "flaglink", "escape/overwritten.txt", tarfile.LNKTYPE)
    add_file(tar, "flaglink", b"overwritten through the chain")
    add_file(tar, "escape/created.txt", b"created through the chain")


def hard_link_to_symlink(tar: tarfile.TarFile, target: Path) -> None:
    """A symlink out, a hard link to the symlink, then a file written through the hard link."""
    add_link(tar, "inner", "../overwritten.txt")
    add_link(tar, "hard", "inner", tarfile.LNKTYPE)
    add_file(tar, "hard", b"overwritten through the hard link")


def symlink_then_file(tar: tarfile.TarFile, target: Path) -> None:
    add_link(tar, "simple", str(target.parent))
    add_file(tar, "simple/overwritten.txt")


def named_twice(tar: tarfile.TarFile, target: Path) -> None:
    """The second replaces the first with extractall: here it refuses the archive."""
    add_file(tar, "a.txt")
    add_file(tar, "a.txt")


HOSTILE_TARS: dict[str, AddMembers] = {
    "dot-dot": lambda tar, target: add_file(tar, "simple/../../overwritten.txt"),
    "absolute": lambda tar, target: add_file(tar, str(target.parent / "overwritten.txt")),
    "drive-letter": lambda tar, target: add_file(tar, "C:/overwritten.txt"),
    "backslash": lambda tar, target: add_file(tar, "a\\..\\..\\overwritten.txt"),
    "symlink-then-file": symlink_then_file,
    "hard-link": lambda tar, target: add_link(
        tar, "simple", str(target.parent / "overwritten.txt"), tarfile.LNKTYPE
    ),
    "hard-link-to-symlink": hard_link_to_symlink,
    "cve-2025-4517-chain": cve_2025_4517,
    "device": lambda tar, target: add_special(tar, "simple/dev", tarfile.CHRTYPE),
    "fifo": lambda tar, target: add_special(tar, "simple/fifo", tarfile.FIFOTYPE),
    "named-twice": named_twice,
}


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """The folder unpacked into (a fetch's staging folder), beside a file that an escape would
    overwrite."""
    folder = tmp_path / "models" / "staging"
    folder.mkdir(parents=True)
    (folder.parent / "overwritten.txt").write_text("original")
    return folder


def assert_nothing_outside(target: Path) -> None:
    assert (target.parent / "overwritten.txt").read_text() == "original"
    assert {p.name for p in target.parent.iterdir()} == {"overwritten.txt", "staging"}


def everything_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.mark.parametrize("shape", sorted(HOSTILE_TARS))
def test_a_hostile_tar_is_refused_and_writes_nothing(target: Path, shape: str) -> None:
    archive = target / "repository.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
        HOSTILE_TARS[shape](tar, target)
    with pytest.raises(UnsafeKeyError, match="archive member refused: "):
        unpack(archive, target, WriteBudget(10 * MiB))
    assert_nothing_outside(target)
    assert everything_under(target) == {"repository.tar"}  # nothing unpacked before the refusal


def zip_entry(name: str, mode: int | None = None, data: bytes = b"x") -> Callable[..., None]:
    def add(bundle: zipfile.ZipFile) -> None:
        info = zipfile.ZipInfo(name)
        if mode is not None:
            info.create_system = 3  # Unix: the mode is in the high bits of external_attr
            info.external_attr = mode << 16
        bundle.writestr(info, data)

    return add


HOSTILE_ZIPS = {
    "dot-dot": [zip_entry("simple/../../overwritten.txt")],
    "absolute": [zip_entry("/overwritten.txt")],
    "drive-letter": [zip_entry("C:/overwritten.txt")],
    "backslash": [zip_entry("a\\..\\..\\overwritten.txt")],
    "symlink-in-external-attr": [
        zip_entry("simple", stat.S_IFLNK | 0o777, b".."),
        zip_entry("simple/overwritten.txt"),
    ],
    "fifo-in-external-attr": [zip_entry("simple/fifo", stat.S_IFIFO | 0o644)],
    "named-twice": [zip_entry("a.txt"), zip_entry("a.txt")],
    "file-and-folder": [zip_entry("a"), zip_entry("a/b.txt")],
}


@pytest.mark.parametrize("shape", sorted(HOSTILE_ZIPS))
def test_a_hostile_zip_is_refused_and_writes_nothing(target: Path, shape: str) -> None:
    archive = target / "model.zip"
    with (
        pytest.warns(UserWarning, match="Duplicate name")
        if shape == "named-twice"
        else contextlib.nullcontext(),
        zipfile.ZipFile(archive, "w") as bundle,
    ):
        for add in HOSTILE_ZIPS[shape]:
            add(bundle)
    with pytest.raises(UnsafeKeyError, match="archive member refused: "):
        unpack(archive, target, WriteBudget(10 * MiB))
    assert_nothing_outside(target)
    assert everything_under(target) == {"model.zip"}


def test_a_plain_tar_with_dot_segments_unpacks_without_modes_or_owners(tmp_path: Path) -> None:
    """``tar -C repo .`` writes ``./`` names; the archive's setuid bit is not kept."""
    archive = tmp_path / "repository.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        root = tarfile.TarInfo(".")
        root.type = tarfile.DIRTYPE
        tar.addfile(root)
        info = tarfile.TarInfo("./simple/1/model.onnx")
        info.size, info.mode = 4, 0o4777
        tar.addfile(info, io.BytesIO(b"onnx"))
    budget = WriteBudget(10 * MiB)
    unpack(archive, tmp_path, budget)
    model = tmp_path / "simple" / "1" / "model.onnx"
    assert everything_under(tmp_path) == {"simple", "simple/1", "simple/1/model.onnx"}
    assert model.read_bytes() == b"onnx"
    assert not model.stat().st_mode & (stat.S_ISUID | stat.S_IXOTH)
    assert budget.written_bytes == 4


def test_a_zip_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("simple/1/model.onnx", bytes(16 * MiB))
    assert archive.stat().st_size < 100_000
    with pytest.raises(SizeLimitError, match=r"more than the limit of 1Mi \(--max-bytes"):
        unpack(archive, tmp_path, WriteBudget(MiB))
    assert everything_under(tmp_path) == {"model.zip"}


def test_a_tar_bomb_stops_at_the_limit(tmp_path: Path) -> None:
    archive = tmp_path / "repository.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        add_file(tar, "simple/1/model.onnx", bytes(16 * MiB))
    with pytest.raises(SizeLimitError, match=r"more than the limit of 1Mi"):
        unpack(archive, tmp_path, WriteBudget(MiB))
    assert everything_under(tmp_path) == {"repository.tar.gz"}


def test_writes_are_counted_as_written_not_as_declared(tmp_path: Path) -> None:
    """What a server or archive declares only lets a fetch give up early: the bound is the
    bytes written, and the write that would pass it writes nothing."""
    budget = WriteBudget(10)
    budget.expect(10)
    with budget.create(tmp_path / "a") as out:
        out.write(b"123456")
        with pytest.raises(SizeLimitError):
            out.write(b"12345")
    assert (tmp_path / "a").read_bytes() == b"123456"
    assert budget.written_bytes == 6
    with pytest.raises(SizeLimitError):
        budget.expect(5)


def test_a_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("original")
    (tmp_path / "link").symlink_to(tmp_path / "outside.txt")
    with pytest.raises(FileExistsError):
        WriteBudget(10).create(tmp_path / "link")
    assert (tmp_path / "outside.txt").read_text() == "original"
