"""Unpacking a downloaded archive (``.tar``, ``.tar.gz``, ``.tgz``, ``.zip``) in place.

Members are checked as object keys are: nothing is written outside the folder, and links are
refused (the ``data`` filter for tar files does both).
"""

from __future__ import annotations

import tarfile
import zipfile
from pathlib import Path

from cachefleet.runtime.storage.paths import UnsafeKeyError, inside, relative_key

SUFFIXES = (".tar", ".tar.gz", ".tgz", ".zip")


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(SUFFIXES)


def unpack(archive: Path, destination: Path) -> None:
    """Unpack ``archive`` into ``destination``, then remove it; UnsafeKeyError for a member
    that would land outside, ValueError for a file that is not the archive its name says."""
    try:
        if archive.name.lower().endswith(".zip"):
            _unzip(archive, destination)
        else:
            with tarfile.open(archive) as tar:
                tar.extractall(destination, filter="data")
    except tarfile.FilterError as error:
        raise UnsafeKeyError(f"archive member refused: {error}") from None
    except (tarfile.TarError, zipfile.BadZipFile) as error:
        raise ValueError(f"{archive.name} is not a readable archive: {error}") from None
    archive.unlink()


def _unzip(archive: Path, destination: Path) -> None:
    with zipfile.ZipFile(archive) as bundle:
        for member in bundle.infolist():
            if member.is_dir():
                continue
            target = inside(destination, relative_key(member.filename, ""))
            target.parent.mkdir(parents=True, exist_ok=True)
            with bundle.open(member) as source, target.open("wb") as out:
                while chunk := source.read(1 << 20):
                    out.write(chunk)
