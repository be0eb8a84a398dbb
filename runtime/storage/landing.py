"""Where a fetch's objects land in the model volume: plain files into the staging folder, and
the one archive a URI names unpacked without sitting beside its tree.

A tar (``.tar``, ``.tar.gz``, ``.tgz``) is unpacked as it streams from its store: its bytes are
never written, so the model volume holds only the tree, and the write budget counts only what
lands in the model folder. A zip is read from its end (its central directory), so it is
downloaded whole first: into the scratch folder when the fetch has one (the operator mounts one,
an emptyDir of its own, only for a URI naming a ``.zip``), bounded there by a budget of the same
size as the model folder's; without one, into the staging folder, where it and its tree both
count against the budget until it is removed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath
from typing import IO

from cachefleet.runtime.storage.archives import is_archive, is_zip, unpack, unpack_stream
from cachefleet.runtime.storage.budget import WriteBudget
from cachefleet.runtime.storage.paths import inside

_CHUNK = 1 << 20


class Landing:
    """The staging folder a store writes into, through ``budget``; ``scratch`` holds a zip
    while it is unpacked (None: the staging folder does)."""

    def __init__(self, staging: Path, budget: WriteBudget, *, scratch: Path | None) -> None:
        self.staging = staging
        self.budget = budget
        self.scratch = scratch

    def expect(self, declared_bytes: int) -> None:
        """Give up before downloading files that say they hold more than the budget has left."""
        self.budget.expect(declared_bytes)

    def create(self, relative: PurePosixPath) -> IO[bytes]:
        """A new file at ``relative`` in the staging folder, its writes charged to the budget."""
        target = inside(self.staging, relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        return self.budget.create(target)

    def unpacks(self, relative: PurePosixPath) -> bool:
        """Whether the one object a URI names, called ``relative``, is an archive to unpack
        (through :meth:`unpack`, not :meth:`create`)."""
        return is_archive(relative)

    def unpack(
        self, relative: PurePosixPath, source: IO[bytes], *, declared_bytes: int | None = None
    ) -> None:
        """Unpack the archive ``source`` reads into the staging folder; ``declared_bytes``, the
        archive's size as its store gives it, is only read for a zip (which is written whole)."""
        if not is_zip(relative):
            unpack_stream(source, relative.name, self.staging, self.budget)
            return
        if self.scratch is None:
            held = inside(self.staging, relative)
            _copy(source, held, self.budget, declared_bytes)
            unpack(held, self.staging, self.budget)
            return
        self.scratch.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".cachefleet-archive-", dir=self.scratch))
        try:
            held = inside(folder, relative)
            # The scratch volume is sized as the model folder is: the zip gets the same bound.
            bound = WriteBudget(self.budget.limit_bytes, option=self.budget.option)
            _copy(source, held, bound, declared_bytes)
            unpack(held, self.staging, self.budget)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _copy(source: IO[bytes], target: Path, budget: WriteBudget, declared: int | None) -> None:
    if declared is not None:
        budget.expect(declared)
    target.parent.mkdir(parents=True, exist_ok=True)
    with budget.create(target) as out:
        shutil.copyfileobj(source, out, length=_CHUNK)
