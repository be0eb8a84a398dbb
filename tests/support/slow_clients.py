"""Clients that go slow or quiet, as slowloris attacks and stalled peers do."""

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


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes ``sock`` within ``seconds`` (reading and dropping what it sends:
    a client that has gone quiet but still reads)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False
