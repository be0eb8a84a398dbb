"""A transport for driving uvicorn's HTTP protocol in process, with no socket: it records what
the protocol writes. The path micro-benchmark and the below-ASGI seam's tests both feed the
real protocol through it, so both read the same mechanism."""

from __future__ import annotations

import asyncio
from typing import Any


class RecordingTransport(asyncio.Transport):
    """Takes every write at once, unless told that the client reads nothing (``backlog``: the
    write buffer's size the protocol sees). ``keep`` bounds the writes recorded (the last
    ones), for a benchmark sending many requests; None keeps all."""

    def __init__(self, keep: int | None = None) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.backlog = 0
        self.closing = False
        self._keep = keep

    def write(self, data: Any) -> None:
        if self._keep is not None and len(self.writes) >= 2 * self._keep:
            del self.writes[: self._keep]
        self.writes.append(bytes(data))

    def get_write_buffer_size(self) -> int:
        return self.backlog

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )
