"""A client that sends a byte at a time, as a slowloris attack does."""

from __future__ import annotations

import socket
import time


def dribble_until_closed(sock: socket.socket, data: bytes, every_s: float) -> float:
    """Send ``data`` one byte every ``every_s`` until the server closes; seconds it took."""
    started = time.monotonic()
    sock.settimeout(every_s)
    for byte in data:
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(65536) == b"":
                return time.monotonic() - started
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - started
    raise AssertionError("the server never closed the slow connection")
