"""The real server application opened in this process, as ``cachefleet serve`` opens it (its
lifespan run by hand), for tests that read the mechanism rather than the wire."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from cachefleet.runtime.config import add_flags, load_settings
from cachefleet.runtime.http.infer_front import InferFront
from cachefleet.runtime.server import create_server


@asynccontextmanager
async def opened_server(repository: Path, *flags: str) -> AsyncIterator[InferFront]:
    """The HTTP application over ``repository`` with ``flags``, its models loaded."""
    parser = argparse.ArgumentParser()
    add_flags(parser)
    args = ["--model-repository", str(repository), "--grpc-port", "0",
            "--log-level", "warning", *flags]  # fmt: skip
    served = create_server(load_settings(parser.parse_args(args), environ={}))
    assert isinstance(served, InferFront)
    messages: asyncio.Queue[dict[str, str]] = asyncio.Queue()
    replies: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    lifespan = asyncio.create_task(
        served({"type": "lifespan", "asgi": {"version": "3.0"}}, messages.get, replies.put)
    )
    await messages.put({"type": "lifespan.startup"})
    assert (await replies.get())["type"] == "lifespan.startup.complete"
    try:
        yield served
    finally:
        await messages.put({"type": "lifespan.shutdown"})
        await replies.get()
        await lifespan
