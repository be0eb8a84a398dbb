"""A model version's fingerprint: what its answers depend on, as one BLAKE3 digest.

It covers the effective configuration (after Triton's defaults, the graph's completion and any
load override) and the bytes of every file that can change an answer: every file under the
version folder (the model file, ONNX external data, anything beside them) and every file the
configuration names (labels). The cache keys it, so other files under the same model name and
version (a rolling update, a reload, another fleet) never share an answer, while replicas on the
same files compute the same fingerprint and share.

Framing: a prefix, the configuration's deterministic serialization, then per file its kind, its
path relative to the model folder and its size, each length-prefixed, followed by its bytes
(streamed, never read whole). Files are taken in path order, so the digest does not depend on
the order a file system lists them in.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path

from blake3 import blake3

from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.model_names import shown_path

_PREFIX = b"cachefleet.fingerprint" + struct.pack("<I", 1)
_U64 = struct.Struct("<Q")
_CHUNK_BYTES = 1 << 20


def fingerprint(config: bytes, files: bytes) -> str:
    """The hex fingerprint of a version from its serialized config and :func:`files_digest`."""
    digest = blake3(_PREFIX)
    digest.update(_framed(config))
    digest.update(files)
    return str(digest.hexdigest())


def files_digest(model_folder: Path, version_folder: Path, named: Sequence[str]) -> bytes:
    """BLAKE3 of every file of the version folder and of each ``named`` file (relative to
    the model folder), framed as the module docstring says. The version folder is the model
    folder itself for a bare model (see ``single_model``).

    Raises ModelLoadError when a file cannot be read.
    """
    digest = blake3()
    try:
        for path in _files_under(version_folder):
            _add(digest, b"version", model_folder, path)
        for name in sorted(set(named)):
            _add(digest, b"named", model_folder, model_folder / name)
    except OSError as error:
        name = shown_path(error.filename, model_folder) if error.filename else "a file"
        raise ModelLoadError(f"cannot read {name}: {error.strerror}") from None
    return digest.digest()


def _files_under(folder: Path) -> Iterable[Path]:
    """Every regular file under ``folder``, in path order. Symbolic links are followed (a
    linked file or folder of external data decides answers too), each real folder once, so a
    link loop cannot hang a load."""
    found: list[Path] = []
    seen: set[str] = set()
    for root, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            folders.clear()
            continue
        seen.add(real)
        found.extend(Path(root) / name for name in names if (Path(root) / name).is_file())
    return sorted(found, key=lambda path: path.relative_to(folder).as_posix())


def _add(digest: blake3, kind: bytes, model_folder: Path, path: Path) -> None:
    relative = path.relative_to(model_folder).as_posix().encode()
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        digest.update(_framed(kind) + _framed(relative) + _U64.pack(size))
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)


def _framed(value: bytes) -> bytes:
    return _U64.pack(len(value)) + value
