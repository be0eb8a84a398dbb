"""Triton's shared-memory extensions: clients register POSIX shared-memory regions by name, then
send inputs and receive outputs through them instead of in the request and response bodies.

Transport-neutral: the HTTP routes (``/v2/systemsharedmemory/...``, ``/v2/cudasharedmemory/...``)
and the gRPC ``SystemSharedMemory*`` / ``CudaSharedMemory*`` calls both use
:class:`SharedMemoryRegistry`; the inference path reads inputs with its ``read`` and writes
outputs with its ``write``.

Safety: a region is a file under ``/dev/shm`` (what ``shm_open`` names, and what tritonclient's
``shared_memory`` module creates), kept open read-write and never mapped: reads and writes are
``pread``/``pwrite`` on the descriptor. A client may shrink the file at any moment, even during
a copy; touching a mapping past the end of its file would kill the process with SIGBUS, where a
read of a shrunk file is merely short, and is a 400. Every read and write is checked against the
registered window (offset, byte size) first. Keys that could name a file outside ``/dev/shm`` are
refused, symlinks are not followed, only regular files are opened, and at most
``max_regions`` are registered at once (each holds a descriptor). What one request reads from
its regions, in all, is bounded as its body is (``--max-request-size``): a BYTES window needs
only room for its length prefixes and a fixed-size one may have dynamic dimensions, so without
the bound a small request could make the server copy gigabytes (a 413 before any is read).

CUDA shared memory is not supported: registering a CUDA region is a 400 that says so; its status
is an empty list and unregistering is a no-op, so clients that clean up both kinds still work.

Used from the event loop only, so nothing here takes a lock.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError

#: Where Linux keeps POSIX shared memory objects (``shm_open("/name")`` is ``/dev/shm/name``).
SHM_ROOT = Path("/dev/shm")
#: Registrations per process: each holds a file descriptor, and a client must not take them all.
MAX_REGIONS = 256


@dataclass
class _Region:
    name: str
    key: str
    offset: int
    byte_size: int
    fd: int

    def status(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "key": self.key,
            "offset": self.offset,
            "byte_size": self.byte_size,
        }

    def close(self) -> None:
        os.close(self.fd)


class SharedMemoryRegistry:
    """The system shared-memory regions registered with this server process."""

    def __init__(
        self,
        root: Path = SHM_ROOT,
        max_regions: int = MAX_REGIONS,
        *,
        max_request_read_bytes: int = 64 * 2**20,
    ) -> None:
        self._root = root
        self._max_regions = max_regions
        #: What one request may read from its regions in all (``--max-request-size``).
        self._max_request_read_bytes = max_request_read_bytes
        self._regions: dict[str, _Region] = {}

    def for_request(self) -> RequestReads:
        """The reader one request's inputs go through, bounded in total."""
        return RequestReads(self, self._max_request_read_bytes)

    # -- system shared memory ------------------------------------------------------------------

    def register_system(self, name: str, key: str, offset: int, byte_size: int) -> None:
        """Map ``byte_size`` bytes at ``offset`` of the POSIX shared-memory object ``key``.

        Raises BadRequestError for a name already registered, a key that is not one plain
        name, a missing object, or a window past the object's end.
        """
        if not isinstance(name, str) or not name:
            raise BadRequestError("a shared memory region needs a non-empty name")
        if name in self._regions:
            raise BadRequestError(f"shared memory region '{name}' is already registered")
        if len(self._regions) >= self._max_regions:
            raise BadRequestError(
                f"cannot register shared memory region '{name}': {len(self._regions)} regions "
                "are registered, the most this server allows; unregister one first"
            )
        path = self._path(key)
        _check_window(offset, byte_size, "register")
        if byte_size == 0:
            raise BadRequestError(f"shared memory region '{name}': byte_size must be positive")
        try:
            # O_NOFOLLOW, as glibc's shm_open: a symlink planted in /dev/shm must not make the
            # server read or write a file the client could not.
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as error:
            raise BadRequestError(
                f"unable to open shared memory region '{name}' key '{key}': {error.strerror}"
            ) from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise BadRequestError(
                    f"shared memory region '{name}': '{key}' is not a shared memory object"
                )
            size = info.st_size
            if offset + byte_size > size:
                raise BadRequestError(
                    f"shared memory region '{name}': offset {offset} + byte_size {byte_size} "
                    f"is past the end of '{key}' ({size} bytes)"
                )
        except BaseException:
            os.close(fd)
            raise
        self._regions[name] = _Region(name, key, offset, byte_size, fd)

    def system_status(self, name: str | None = None) -> list[dict[str, Any]]:
        """``[{"name", "key", "offset", "byte_size"}]`` of every region, or of ``name``."""
        if name is None:
            return [region.status() for region in self._regions.values()]
        return [self._region(name).status()]

    def unregister_system(self, name: str | None = None) -> None:
        """Unmap region ``name`` (every region if None); an unknown name is a no-op, as in
        Triton. The client's shared-memory object itself is never removed."""
        names = list(self._regions) if name is None else [name]
        for each in names:
            region = self._regions.pop(each, None)
            if region is not None:
                region.close()

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """A copy of ``byte_size`` bytes at ``offset`` inside region ``name``."""
        region, start = self._window(name, offset, byte_size, "read")
        data = os.pread(region.fd, byte_size, start)
        if len(data) < byte_size:
            raise _shrank(region)
        return data

    def write(self, name: str, offset: int, byte_size: int, data: bytes) -> None:
        """Write ``data`` at ``offset`` inside region ``name``, where the client has reserved
        ``byte_size`` bytes for it."""
        if len(data) > byte_size:
            raise BadRequestError(
                f"shared memory region '{name}': the output has {len(data)} bytes, more than "
                f"the {byte_size} bytes reserved for it"
            )
        region, start = self._window(name, offset, byte_size, "write")
        if os.fstat(region.fd).st_size < start + len(data):
            raise _shrank(region)  # pwrite would grow the client's object back: refuse instead
        view = memoryview(data)
        while view:
            written = os.pwrite(region.fd, view, start)
            view, start = view[written:], start + written

    def close(self) -> None:
        self.unregister_system()

    # -- CUDA shared memory: not supported -----------------------------------------------------

    def register_cuda(self, name: str, device_id: int, byte_size: int) -> None:
        raise BadRequestError(
            f"cannot register CUDA shared memory region '{name}': CUDA shared memory is not "
            "supported by this server; use system shared memory"
        )

    def cuda_status(self, name: str | None = None) -> list[dict[str, Any]]:
        if name is not None:
            raise BadRequestError(f"unable to find CUDA shared memory region '{name}'")
        return []

    def unregister_cuda(self, name: str | None = None) -> None:
        return None

    # -- checks --------------------------------------------------------------------------------

    def _path(self, key: Any) -> Path:
        if not isinstance(key, str):
            raise BadRequestError("a shared memory key must be a string like '/name'")
        plain = key[1:] if key.startswith("/") else key
        if not plain or "/" in plain or plain in (".", "..") or "\0" in plain:
            raise BadRequestError(
                f"shared memory key {key!r} must be one name like '/input_data' (no other '/')"
            )
        return self._root / plain

    def _region(self, name: str) -> _Region:
        region = self._regions.get(name)
        if region is None:
            raise BadRequestError(f"unable to find system shared memory region '{name}'")
        return region

    def _window(self, name: str, offset: int, byte_size: int, action: str) -> tuple[_Region, int]:
        """The region and the absolute start of ``[offset, offset + byte_size)`` inside it."""
        region = self._region(name)
        _check_window(offset, byte_size, action)
        if offset + byte_size > region.byte_size:
            raise BadRequestError(
                f"shared memory region '{name}': cannot {action} {byte_size} bytes at offset "
                f"{offset}, the region has {region.byte_size} bytes"
            )
        return region, region.offset + offset


class RequestReads:
    """One request's reads of shared memory: their total is bounded before a byte is read."""

    def __init__(self, registry: SharedMemoryRegistry, limit: int) -> None:
        self._registry = registry
        self._limit = limit
        self._read = 0

    def read(self, name: str, offset: int, byte_size: int) -> bytes:
        """As :meth:`SharedMemoryRegistry.read`; raises PayloadTooLargeError (413) when the
        request's reads would come to more than the limit."""
        if isinstance(byte_size, int) and self._read + byte_size > self._limit:
            raise PayloadTooLargeError(
                f"shared memory region '{name}': reading {byte_size} bytes would bring the "
                f"request's shared-memory inputs to {self._read + byte_size} bytes, over the "
                f"{self._limit} bytes a request may carry (--max-request-size)"
            )
        data = self._registry.read(name, offset, byte_size)
        self._read += len(data)
        return data


def _shrank(region: _Region) -> BadRequestError:
    return BadRequestError(
        f"shared memory region '{region.name}': '{region.key}' shrank below the registered "
        "size; register it again"
    )


def _check_window(offset: Any, byte_size: Any, action: str) -> None:
    for label, value in (("offset", offset), ("byte_size", byte_size)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequestError(
                f"shared memory {action}: {label} must be a non-negative integer, not {value!r}"
            )
