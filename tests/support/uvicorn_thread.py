"""A real uvicorn serving a test's own ASGI application on loopback, from a thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def serving(config: uvicorn.Config) -> Iterator[uvicorn.Server]:
    """``config``'s server, started (within 10 s) and stopped on exit."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(10)
