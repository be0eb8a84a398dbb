"""The most bytes one fetch may write: downloads and unpacked archives together.

A 1 MB zip can hold a 1 GiB file, and a web server's ``Content-Length`` is whatever it says, so
the bound is kept on the bytes actually written: every file a fetch creates is opened through
:meth:`WriteBudget.create`, whose writes are charged before they reach the disk. Sizes a store or
an archive declares are only used to give up early (:meth:`WriteBudget.expect`), never to let more
through. Counting written bytes (an archive and its contents both count) keeps the fetch under the
model volume's own limit, so the kubelet never evicts the pod half-way through a download.
"""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from cachefleet.runtime.config.quantity import format_bytes

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class SizeLimitError(ValueError):
    """The fetch would write more than its limit."""


class WriteBudget:
    """``limit_bytes`` to spend across every file of one fetch (thread-safe: a store's client
    may write from its own threads)."""

    def __init__(self, limit_bytes: int, *, option: str = "--max-bytes") -> None:
        self.limit_bytes = limit_bytes
        self.option = option
        self.written_bytes = 0
        self._lock = threading.Lock()

    @property
    def remaining_bytes(self) -> int:
        return self.limit_bytes - self.written_bytes

    def charge(self, count: int) -> None:
        """Spend ``count`` bytes about to be written; SizeLimitError (nothing spent) past the
        limit."""
        with self._lock:
            if self.written_bytes + count > self.limit_bytes:
                raise self._error("writes")
            self.written_bytes += count

    def expect(self, declared_bytes: int) -> None:
        """Give up before downloading or unpacking what says it is larger than what is left."""
        if declared_bytes > self.remaining_bytes:
            raise self._error("says it holds")

    def create(self, path: Path) -> io.FileIO:
        """A new file at ``path`` (refused when anything, a link included, is already there),
        opened for writing with every write charged to this budget."""
        return _MeteredFile(path, self)

    def _error(self, verb: str) -> SizeLimitError:
        limit = format_bytes(self.limit_bytes)
        return SizeLimitError(
            f"the download {verb} more than the limit of {limit} ({self.option}, the service's "
            "model.storageSizeLimit): nothing was kept"
        )


class _MeteredFile(io.FileIO):
    """A file whose writes are charged to a budget first; created exclusively (O_EXCL also
    refuses a symlink at the path) so a fetch never writes through a link or over a file."""

    def __init__(self, path: Path, budget: WriteBudget) -> None:
        super().__init__(path, "xb", opener=_no_follow)
        self._budget = budget

    def write(self, data: ReadableBuffer, /) -> int:
        view = memoryview(data)
        self._budget.charge(view.nbytes)
        return super().write(view)


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
