"""What one HTTP memo hit costs inside the server: the ASGI app driven in-process, no sockets.

The HTTP floor (``cachefleet bench``) measures from outside, where the kernel, uvicorn and the
load generator share the figure; this measures only what the server's own code adds to a hit.
It opens the real server app (``server.create_server``: the infer front, the memo, the local
tier, the request ledger) on the ``simple`` sample, answers one request through the model so
that the next are memo hits, then times ``--requests`` hits called straight through the ASGI
interface, beside a bare ASGI app that reads the same body and sends the same answer bytes.
The difference between the two is the work a hit does (its description, budget, hashing, memo
lookup, confirmation and counting); the best of ``--rounds`` rounds is reported, as noise only
adds. Run ``bash scripts/harness http_hit_micro`` (pin it, e.g. ``taskset -c 0``, for steadier
figures).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from cachefleet.bench.bodies import InputSpec, build_request_set
from cachefleet.runtime.config.flags import load_settings
from cachefleet.runtime.samples.repository import write_samples
from cachefleet.runtime.server import create_server

Message = dict[str, Any]
App = Callable[[dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]  # fmt: skip  # noqa: E501


def simple_body() -> tuple[bytes, int]:
    """The binary-extension body ``cachefleet bench`` sends for a hit of ``simple``
    (``bench.bodies``, one encoder for both), and its JSON header's length: this harness times
    the request the floor and the peers are measured with."""
    inputs = [InputSpec(name, "INT32", (1, 16)) for name in ("INPUT0", "INPUT1")]
    requests = build_request_set("simple", inputs, ["OUTPUT0", "OUTPUT1"], "binary", warm_count=1)
    return requests.hit_bodies[0], int(requests.headers["Inference-Header-Content-Length"])


def _scope(body: bytes, json_size: int) -> dict[str, Any]:
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/octet-stream"),
        (b"inference-header-content-length", b"%d" % json_size),
        (b"content-length", b"%d" % len(body)),
    ]
    path = "/v2/models/simple/infer"
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8000),
    }  # fmt: skip


def bare_app(answer: list[Message]) -> App:
    """An ASGI app that reads the body and sends ``answer``'s messages: the least any app does."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        for message in answer:
            await send(message)

    return app


async def _best_us(
    app: App, scope: dict[str, Any], body: bytes, requests: int, rounds: int
) -> float:
    message: Message = {"type": "http.request", "body": body, "more_body": False}

    async def receive() -> Message:
        return message

    async def send(_: Message) -> None:
        return None

    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(requests):
            await app(scope, receive, send)
        best = min(best, (time.perf_counter() - started) / requests * 1e6)
    return best


async def measure(requests: int, rounds: int) -> tuple[float, float]:
    """Microseconds per memo hit through the server's app, and through the bare app."""
    body, json_size = simple_body()
    scope = _scope(body, json_size)
    with tempfile.TemporaryDirectory() as folder:
        write_samples(Path(folder), ("simple",))
        environ = {"CACHEFLEET_MODEL_REPOSITORY": folder, "CACHEFLEET_CACHE": "local"}
        app: Any = create_server(load_settings(None, {**os.environ, **environ}))
        inbox: asyncio.Queue[Message] = asyncio.Queue()
        outbox: asyncio.Queue[Message] = asyncio.Queue()
        await inbox.put({"type": "lifespan.startup"})
        life = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
        started = await outbox.get()
        if started["type"] != "lifespan.startup.complete":
            raise SystemExit(f"the server did not start: {started}")
        answer: list[Message] = []
        first: dict[str, bool] = {"read": False}

        async def receive_once() -> Message:
            # The first request goes through the model, which waits for the client to go
            # away while it runs: give it the body once, then nothing.
            if not first["read"]:
                first["read"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def receive_hit() -> Message:
            return {"type": "http.request", "body": body, "more_body": False}

        async def keep(message: Message) -> None:
            answer.append(message)

        await app(scope, receive_once, keep)  # a miss: the model runs, the local tier keeps it
        await _best_us(app, scope, body, 2, 1)  # local hits: the memo keeps the answer
        answer.clear()
        await app(scope, receive_hit, keep)  # a memo hit: the bytes the bare app will send
        if dict(answer[0]["headers"]).get(b"x-cache") != b"hit-local":
            raise SystemExit(f"not a memo hit: {answer[0]}")
        cachefleet_us = await _best_us(app, scope, body, requests, rounds)
        bare_us = await _best_us(bare_app(answer), scope, body, requests, rounds)
        await inbox.put({"type": "lifespan.shutdown"})
        await life
    return cachefleet_us, bare_us


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="hits per round (2000)")
    parser.add_argument("--rounds", type=int, default=15, help="rounds; the best is kept (15)")
    args = parser.parse_args(argv)
    ours, bare = asyncio.run(measure(args.requests, args.rounds))
    print(f"memo hit through the server's ASGI app: {ours:.1f} us")
    print(f"the same bytes from a bare ASGI app:    {bare:.1f} us")
    print(f"the server's own work per hit:          {ours - bare:.1f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
