"""Object keys to local paths, never outside the target folder.

A store's keys are chosen by whoever writes the bucket: ``models/../../etc/x`` or an absolute
``/etc/x`` is a valid S3 key. Every file a fetch writes goes through :func:`inside`.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath


class UnsafeKeyError(ValueError):
    """A key whose local path would leave the target folder."""


def relative_key(key: str, prefix: str) -> PurePosixPath:
    """``key`` below ``prefix`` (both '/'-separated), checked to stay below it."""
    rest = key[len(prefix) :] if prefix and key.startswith(prefix) else key
    parts = [p for p in rest.split("/") if p]
    if not parts or any(p in (".", "..") or "\\" in p or "\0" in p for p in parts):
        raise UnsafeKeyError(f"object key {key!r} does not name a file inside the prefix")
    return PurePosixPath(*parts)


def inside(root: Path, relative: PurePosixPath) -> Path:
    """``root / relative``, refused when it resolves outside ``root`` (a symlink included)."""
    target = (root / relative).resolve()
    base = root.resolve()
    if target != base and base not in target.parents:
        raise UnsafeKeyError(f"{relative} resolves outside the target folder")
    return target
