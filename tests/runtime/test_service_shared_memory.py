"""The shared-memory registry on its own: reads and writes of a file that shrinks are 400s (never
a SIGBUS, which would kill this very test process), and registrations are capped."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError
from cachefleet.runtime.service.shared_memory import SharedMemoryRegistry


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path


def _object(root: Path, name: str, size: int) -> Path:
    path = root / name
    path.write_bytes(bytes(range(256)) * (size // 256))
    return path


def test_reads_and_writes_go_through_the_window(root: Path) -> None:
    _object(root, "obj", 1024)
    registry = SharedMemoryRegistry(root)
    registry.register_system("r", "/obj", 256, 512)
    assert registry.read("r", 0, 4) == bytes([0, 1, 2, 3])
    registry.write("r", 4, 4, b"\xff\xff")
    assert registry.read("r", 4, 3) == b"\xff\xff\x06"
    with pytest.raises(BadRequestError, match="the region has 512 bytes"):
        registry.read("r", 500, 13)
    registry.close()


def test_a_shrunk_file_is_a_bad_request_for_reads_and_writes(root: Path) -> None:
    path = _object(root, "obj", 4096)
    registry = SharedMemoryRegistry(root)
    registry.register_system("r", "/obj", 0, 4096)
    os.truncate(path, 100)
    with pytest.raises(BadRequestError, match="shrank"):
        registry.read("r", 0, 4096)
    with pytest.raises(BadRequestError, match="shrank"):
        registry.write("r", 0, 4096, b"x" * 200)
    assert path.stat().st_size == 100  # a refused write does not grow the client's object
    registry.close()


def test_a_file_that_flaps_during_reads_never_crashes(root: Path) -> None:
    size = 8 << 20
    path = _object(root, "obj", size)
    registry = SharedMemoryRegistry(root)
    registry.register_system("r", "/obj", 0, size)
    stop = threading.Event()

    def flap() -> None:
        while not stop.is_set():
            os.truncate(path, 0)
            os.truncate(path, size)

    thread = threading.Thread(target=flap)
    thread.start()
    outcomes = {"read": 0, "refused": 0}
    try:
        for _ in range(200):
            try:
                registry.read("r", 0, size)
                outcomes["read"] += 1
            except BadRequestError:
                outcomes["refused"] += 1
    finally:
        stop.set()
        thread.join()
        registry.close()
    assert sum(outcomes.values()) == 200


def test_registrations_are_capped(root: Path) -> None:
    _object(root, "obj", 256)
    registry = SharedMemoryRegistry(root, max_regions=3)
    for index in range(3):
        registry.register_system(f"r{index}", "/obj", 0, 256)
    with pytest.raises(BadRequestError, match="3 regions are registered"):
        registry.register_system("r3", "/obj", 0, 256)
    registry.unregister_system("r0")
    registry.register_system("r3", "/obj", 0, 256)
    registry.close()


def test_one_requests_reads_are_bounded_in_total(root: Path) -> None:
    """Each read fits its window, but a request's reads together may not pass the limit (two
    inputs of 600 bytes under a limit of 1000); another request starts from zero."""
    _object(root, "obj", 1024)
    registry = SharedMemoryRegistry(root, max_request_read_bytes=1000)
    registry.register_system("r", "/obj", 0, 1024)
    reads = registry.for_request()
    assert len(reads.read("r", 0, 600)) == 600
    with pytest.raises(PayloadTooLargeError, match=r"1200 bytes, over the 1000 .*max-request-size"):
        reads.read("r", 0, 600)
    assert len(registry.for_request().read("r", 400, 600)) == 600
    registry.close()
