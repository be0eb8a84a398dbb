"""The fingerprint of an upstream model version: what the upstream reports, and shared files.

A local model's fingerprint hashes its effective config and its files (``models.fingerprint``).
An upstream's files are out of sight unless this server mounts the same repository
(``--upstream-model-repository``), so the fingerprint hashes what the upstream reports of the
version instead, all of which every replica reads alike (replicas in front of the same upstream
share entries):

- the upstream server's name and version (a new release of it may answer differently);
- the model's name and version, and its index row's state and reason;
- the model's whole configuration as the upstream reports it, serialized deterministically
  (a cachefleet upstream puts its own files' fingerprint among the config's parameters, so
  there the files are covered too);
- with a shared repository, the digest of the version folder's files and of every file the
  config names, exactly as a local model's (re-read only when a file's size, time or inode
  changed).

What it cannot see is written down in ``docs/guide/upstream.md``: above all, files replaced
under the same version and config and reloaded by a Triton that shares no folder with us.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path

from blake3 import blake3

from cachefleet.runtime.models.confined import confined_file
from cachefleet.runtime.models.fingerprint import files_digest, fingerprint

_PREFIX = b"cachefleet.upstream" + struct.pack("<I", 1)
_U32 = struct.Struct("<I")


def reported_identity(server: str, name: str, version: str, state: str, config: bytes) -> bytes:
    """The framed bytes of what the upstream reports about one model version."""
    digest = blake3(_PREFIX)
    for part in (server.encode(), name.encode(), version.encode(), state.encode(), config):
        digest.update(_U32.pack(len(part)))
        digest.update(part)
    return bytes(digest.digest())


class SharedFiles:
    """The files digest of model versions in a repository this server shares with the upstream;
    a version's files are hashed again only when their listing (path, size, mtime, inode)
    changed since the last time."""

    def __init__(self, repository: Path) -> None:
        self._repository = repository
        self._seen: dict[tuple[str, str], tuple[tuple[object, ...], bytes]] = {}

    def digest(self, name: str, version: str, named: Sequence[str]) -> bytes:
        """The digest of ``name``'s version folder ``version`` and the files in ``named``;
        empty where the shared folder has no such version (the upstream reads another)."""
        model_folder = self._repository / name
        version_folder = model_folder / version
        if not version_folder.is_dir():
            return b""
        for item in named:  # a name the upstream reports never leads out of the folder
            confined_file(model_folder, item, field="label_filename", root=self._repository)
        listing = _listing(model_folder, version_folder, named)
        seen = self._seen.get((name, version))
        if seen is not None and seen[0] == listing:
            return seen[1]
        digest = files_digest(model_folder, version_folder, named)
        self._seen[(name, version)] = (listing, digest)
        return digest


def upstream_fingerprint(reported: bytes, files: bytes) -> str:
    """The hex fingerprint that goes into every cache key of the version."""
    return fingerprint(reported, files)


def _listing(model_folder: Path, version_folder: Path, named: Sequence[str]) -> tuple[object, ...]:
    paths = [*sorted(_files(version_folder)), *(model_folder / item for item in named)]
    rows: list[object] = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            rows.append((str(path), None))
            continue
        rows.append((str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino))
    return tuple(rows)


def _files(folder: Path) -> list[Path]:
    found: list[Path] = []
    for root, _dirs, files in os.walk(folder, followlinks=True):
        found.extend(Path(root) / file for file in files)
    return found
