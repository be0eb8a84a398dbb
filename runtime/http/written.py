"""The ASGI scope extension by which the connection guard tells a request when its answer has
been written.

``scope["extensions"][WRITTEN]`` is a callable returning None when nothing waits in the
connection's write buffer, else a future done once the buffer is empty or the connection gone.
uvicorn's ``send`` returns once the answer is handed to the transport, which holds what the
client has not read; the infer endpoint keeps the answer's bytes charged to the budget until this
says they are gone (see ``answer_charge``). The guard's write deadline bounds the wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

WRITTEN = "cachefleet.written"


def written_waiter(scope: Mapping[str, Any]) -> asyncio.Future[None] | None:
    """What to wait for until the answer of ``scope``'s request is written; None: nothing
    (already written, or a server without the guard)."""
    extensions = scope.get("extensions")
    if not extensions:
        return None
    written: Callable[[], asyncio.Future[None] | None] | None = extensions.get(WRITTEN)
    return None if written is None else written()
