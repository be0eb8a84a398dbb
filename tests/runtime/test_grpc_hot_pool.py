"""The gRPC server's thread pool: results and errors through futures, quick work kept on the
warm thread, new threads only while the others are held, at most the bound, queued work run as
threads free up, and a shutdown that ends every thread."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import pytest

from cachefleet.runtime.grpc.hot_pool import HotThreadPool


def _settle(pool: HotThreadPool, idle: int) -> None:
    """Wait until ``idle`` threads wait for work (a finished call's thread idles just after its
    future completes)."""
    deadline = time.monotonic() + 5
    while len(pool._idle) < idle:
        assert time.monotonic() < deadline, "threads did not go idle"
        time.sleep(0.001)


def test_results_and_errors_come_back_through_the_futures() -> None:
    pool = HotThreadPool(4, "test")
    try:
        assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(5) == 5
        failing = pool.submit(lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            failing.result(5)
    finally:
        pool.shutdown()


def test_quick_calls_one_after_another_keep_to_one_thread() -> None:
    pool = HotThreadPool(32, "test")
    try:
        names = set()
        for _ in range(50):
            names.add(pool.submit(lambda: threading.current_thread().name).result(5))
            _settle(pool, 1)
        assert len(names) == 1
        assert len(pool._threads) == 1
    finally:
        pool.shutdown()


def test_held_threads_make_room_for_new_ones_up_to_the_bound() -> None:
    pool = HotThreadPool(3, "test")
    release = threading.Event()
    try:
        held = [pool.submit(release.wait, 5) for _ in range(3)]
        assert len(pool._threads) == 3
        queued = pool.submit(lambda: "ran")
        assert len(pool._threads) == 3  # the bound: queued, not a fourth thread
        time.sleep(0.05)
        assert not queued.done()
        release.set()
        assert queued.result(5) == "ran"
        assert all(future.result(5) for future in held)
    finally:
        release.set()
        pool.shutdown()


def test_a_held_thread_does_not_hold_up_quick_calls() -> None:
    pool = HotThreadPool(4, "test")
    release = threading.Event()
    try:
        slow = pool.submit(release.wait, 5)
        quick = [pool.submit(lambda n=n: n * 2) for n in range(20)]
        assert [future.result(5) for future in quick] == [n * 2 for n in range(20)]
        assert not slow.done()
    finally:
        release.set()
        pool.shutdown()


def test_shutdown_ends_every_thread_and_refuses_new_work() -> None:
    pool = HotThreadPool(2, "test")
    release = threading.Event()
    pool.submit(lambda: None).result(5)
    running = pool.submit(release.wait, 5)
    also_running = pool.submit(release.wait, 5)
    never = pool.submit(lambda: "never")
    pool.shutdown(wait=False, cancel_futures=True)
    assert never.cancelled()
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    release.set()
    assert running.result(5) is True
    assert also_running.result(5) is True
    for thread in pool._threads:
        thread.join(5)
        assert not thread.is_alive()


def test_it_is_an_executor() -> None:
    pool = HotThreadPool(2, "test")
    with pool:
        assert list(pool.map(abs, [-1, -2, 3])) == [1, 2, 3]
    assert isinstance(pool, futures.Executor)
