"""A real uvicorn serving a test's own ASGI application on loopback, from a thread.

The server binds port 0 and the test reads the port the kernel gave it: a port picked free
beforehand could be taken meanwhile by a server another test worker starts, which would then
find this test's application answering on its port."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn


@contextmanager
def serving(config: uvicorn.Config) -> Iterator[int]:
    """``config``'s server (give it ``port=0``), started within 10 s; yields its port, and
    stops it on exit."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
