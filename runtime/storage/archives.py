"""Unpacking an archive (``.tar``, ``.tar.gz``, ``.tgz``, ``.zip``), every member checked here,
whatever Python runs it: from a file (:func:`unpack`, a ``.zip``, whose central directory is at
its end) or as it streams from its store (:func:`unpack_stream`, a tar, which never lands on disk
beside its tree).

The interpreter's own tar filters cannot be trusted for this: ``filter="data"`` had escapes
(CVE-2025-4517 and its siblings: a chain of symlinks whose real path passes PATH_MAX, a hard link
to a symlink) until Python 3.11.13 / 3.12.11, and zip extraction has no filter at all. So:

- a member's name is a relative path: an absolute name, a drive letter, a backslash, a NUL or a
  ``..`` segment refuses the archive (``.`` segments are dropped: ``tar -C dir .`` writes them);
- only regular files and folders are unpacked: a symlink, a hard link, a device, a FIFO (or a
  zip entry whose Unix mode says one of these) refuses the archive. Links are refused, not
  checked: a model repository needs none, and no rule for "safe" links has stayed safe;
- from a file, every member is checked before anything is written, so a refused archive writes
  nothing; a streamed tar cannot be read twice, so each member is checked as it comes and the
  caller unpacks into a staging folder that it removes on any refusal (``fetch``);
- each file is created new (never through a link, never over another member), with the default
  permissions (no owners, modes or setuid bits from the archive), and must resolve inside the
  folder;
- the sizes the archive declares must fit the fetch's :class:`WriteBudget` before unpacking
  starts (streamed: before each member is written; a tar header's size is its data's, a zip's
  may lie), and the bytes written are charged as they are written, so a zip or tar bomb stops at
  the limit.
"""

from __future__ import annotations

import gzip
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from cachefleet.runtime.storage.budget import WriteBudget
from cachefleet.runtime.storage.paths import UnsafeKeyError, inside

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")
_DRIVE = re.compile(r"^[A-Za-z]:")
_CHUNK = 1 << 20


_ERRORS = (tarfile.TarError, zipfile.BadZipFile, gzip.BadGzipFile, zlib.error, EOFError)


@dataclass(frozen=True)
class _Member:
    """A checked member: where it goes, its declared size, and how to read it (None for a
    folder)."""

    path: PurePosixPath
    size: int
    open: Callable[[], IO[bytes]] | None


def is_archive(path: PurePosixPath | Path) -> bool:
    return path.name.lower().endswith(SUFFIXES)


def is_zip(path: PurePosixPath | Path) -> bool:
    """A zip is read from its end (the central directory): it cannot be unpacked as it streams."""
    return path.name.lower().endswith(".zip")


def unpack(archive: Path, destination: Path, budget: WriteBudget) -> None:
    """Unpack ``archive`` into ``destination``, then remove it; UnsafeKeyError for a member
    refused, SizeLimitError past the budget, ValueError for a file that is not the archive its
    name says."""
    try:
        if is_zip(archive):
            with zipfile.ZipFile(archive) as bundle:
                members = _check_all(_zip_members(bundle), archive.name, budget)
                _write(members, None, destination, budget)
        else:
            with tarfile.open(archive) as tar:
                members = _check_all(_tar_members(tar), archive.name, budget)
                _write(members, None, destination, budget)
    except _ERRORS as error:
        raise ValueError(f"{archive.name} is not a readable archive: {error}") from None
    except NotImplementedError as error:  # a zip compression method zipfile lacks
        raise ValueError(f"{archive.name}: {error}") from None
    archive.unlink()


def unpack_stream(source: IO[bytes], name: str, destination: Path, budget: WriteBudget) -> None:
    """Unpack the tar (plain or compressed) that ``source`` reads, named ``name``, into
    ``destination`` as it streams: each member checked as its header comes and written before
    the next is read. A refusal raises as :func:`unpack` does, with the members before it already
    written: ``destination`` must be a staging folder the caller removes on failure."""
    try:
        with tarfile.open(fileobj=source, mode="r|*") as tar:
            _write(_tar_members(tar, budget), _Names(), destination, budget)
    except _ERRORS as error:
        raise ValueError(f"{name} is not a readable archive: {error}") from None


def _check_all(members: Iterable[_Member], archive_name: str, budget: WriteBudget) -> list[_Member]:
    """Every member checked before any is written: names, and the sizes declared together."""
    names = _Names(archive_name)
    checked, declared = [], 0
    for member in members:
        names.add(member)
        declared += member.size
        budget.expect(declared)
        checked.append(member)
    return checked


def _write(
    members: Iterable[_Member], names: _Names | None, destination: Path, budget: WriteBudget
) -> None:
    """Write each member; ``names`` checks each as it comes (None: checked already)."""
    for member in members:
        if names is not None:
            names.add(member)
        target = inside(destination, member.path)
        if member.open is None:
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with member.open() as source, budget.create(target) as out:
            while chunk := source.read(_CHUNK):
                out.write(chunk)


def _tar_members(tar: tarfile.TarFile, budget: WriteBudget | None = None) -> Iterator[_Member]:
    """Each member of ``tar``, checked as its header is read; streamed (with the ``budget``), a
    member whose declared size passes what is left is refused before its data is read."""
    for info in tar:
        path = _member_path(info.name)
        if info.isdir():
            if path is not None:
                yield _Member(path, 0, None)
            continue
        if not info.isreg():
            raise _refused(info.name, f"is a {_tar_kind(info)}; only files and folders unpack")
        if path is None:
            raise _refused(info.name, "is a file without a name")
        if budget is not None:
            budget.expect(info.size)
        yield _Member(path, info.size, _tar_reader(tar, info))


def _tar_reader(tar: tarfile.TarFile, info: tarfile.TarInfo) -> Callable[[], IO[bytes]]:
    def read() -> IO[bytes]:
        source = tar.extractfile(info)
        assert source is not None  # a regular member always has data
        return source

    return read


def _tar_kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return f"symlink (to {info.linkname!r})"
    if info.islnk():
        return f"hard link (to {info.linkname!r})"
    if info.ischr() or info.isblk():
        return "device"
    if info.isfifo():
        return "FIFO"
    return f"member of type {info.type!r}"


def _zip_members(bundle: zipfile.ZipFile) -> Iterator[_Member]:
    for info in bundle.infolist():
        path = _member_path(info.filename)
        kind = stat.S_IFMT(info.external_attr >> 16)
        if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
            what = "symlink" if kind == stat.S_IFLNK else f"special file (mode {kind:o})"
            raise _refused(info.filename, f"is a {what}; only files and folders unpack")
        if info.is_dir() or kind == stat.S_IFDIR:
            if path is not None:
                yield _Member(path, 0, None)
            continue
        if info.flag_bits & 0x1:
            raise _refused(info.filename, "is encrypted")
        if path is None:
            raise _refused(info.filename, "is a file without a name")
        yield _Member(path, info.file_size, _zip_reader(bundle, info))


def _zip_reader(bundle: zipfile.ZipFile, info: zipfile.ZipInfo) -> Callable[[], IO[bytes]]:
    return lambda: bundle.open(info)


def _member_path(name: str) -> PurePosixPath | None:
    """The relative path a member's name gives; None for the archive's root folder."""
    if not name or "\0" in name or "\\" in name or name.startswith("/") or _DRIVE.match(name):
        raise _refused(name, "is not a relative path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise _refused(name, "climbs out with '..'")
    return PurePosixPath(*parts) if parts else None


class _Names:
    """The names unpacked so far: a file named twice, or named as a folder another member needs
    (or the reverse), or the archive's own name, is refused as it comes, so a later member never
    replaces an earlier one."""

    def __init__(self, *taken: str) -> None:
        self._files = {PurePosixPath(name) for name in taken}
        self._folders: set[PurePosixPath] = set()

    def add(self, member: _Member) -> None:
        path = member.path
        if member.open is not None:
            if path in self._files:
                raise _refused(str(path), "is named twice (or is the archive's own name)")
            if path in self._folders:
                raise _refused(str(path), "is both a file and a folder")
            self._files.add(path)
        elif path in self._files:
            raise _refused(str(path), "is both a file and a folder")
        else:
            self._folders.add(path)
        for parent in path.parents:
            if parent in self._files:
                raise _refused(str(parent), "is both a file and a folder")
            self._folders.add(parent)


def _refused(name: str, why: str) -> UnsafeKeyError:
    return UnsafeKeyError(f"archive member refused: {name!r} {why}")
