"""Waiting for a positive signal, never for a fixed time: poll ``check`` until it holds.

``check`` returns something truthy once the awaited state is there (that value is returned), or
raises to fail early; the wait fails with ``what`` when the deadline passes first.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(check: Callable[[], T], what: str, timeout_s: float = 10) -> T:
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.02)
    return result


async def wait_for_async(check: Callable[[], Awaitable[T]], what: str, timeout_s: float = 10) -> T:
    deadline = time.monotonic() + timeout_s
    while not (result := await check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.02)
    return result
