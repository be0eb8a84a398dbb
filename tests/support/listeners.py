"""A loopback listener that accepts connections and never answers: a pod that hangs, or a proxy
that must not be used. It counts the connections it saw and the most it held open at once.

With ``hold_s`` it closes each connection itself after that long, and counts it closed before
closing it: a client cannot open its next connection before the count dropped, so
``most_open`` is exact (a client that gives up first is seen closed only a moment later).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class SilentListener:
    """Accepts on a free loopback port in a thread of its own; ``with`` closes it."""

    def __init__(self, hold_s: float | None = None) -> None:
        self.hold_s = hold_s
        self._server = socket.create_server(("127.0.0.1", 0), backlog=1024)
        self.port: int = self._server.getsockname()[1]
        self._guard = threading.Lock()
        self.accepted = 0
        self.open = 0
        self.most_open = 0
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._guard:
                self.accepted += 1
                self.open += 1
                self.most_open = max(self.most_open, self.open)
            threading.Thread(target=self._hold, args=(connection,), daemon=True).start()

    def _hold(self, connection: socket.socket) -> None:
        """Read and drop until the client gives up (or ``hold_s`` passed), then close."""
        deadline = None if self.hold_s is None else time.monotonic() + self.hold_s
        with connection:
            with contextlib.suppress(OSError):  # (a timeout is one)
                while deadline is None or time.monotonic() < deadline:
                    if deadline is not None:
                        connection.settimeout(max(0.01, deadline - time.monotonic()))
                    if not connection.recv(4096):
                        break
            with self._guard:
                self.open -= 1

    def __enter__(self) -> SilentListener:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:  # fmt: skip
        with contextlib.suppress(OSError):
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        self._server.close()
