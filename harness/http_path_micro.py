"""What one HTTP request costs the server's process, below and above ASGI, without sockets.

``http_hit_micro`` drives the ASGI app and so misses what the HTTP protocol does below it (the
connection guard, the memo hit answered there, the head held back and handed over on a miss).
This drives uvicorn's httptools protocol (``uvicorn_protocol.GuardedHttpToolsProtocol``) over a
transport that records writes, into the real server app opened by its lifespan as
``cachefleet serve`` opens it, one request at a time, for a server per ``--cache`` mode, all in
one process: ``simple``'s request as tritonclient encodes it (binary inputs), each request a new
input (``--kind miss``: 0% repeats) or the same one (``--kind hit``). Rounds alternate the modes
(each round in a rotated order) so that the machine's noise falls on each alike; each round's
figure is the process's CPU time per request (``time.process_time_ns``: the model's threads
included), and the report gives the min and median per mode, and each mode over ``none`` as the
median of the rounds' ratios (the two ran next to each other: the ratio cancels the machine's
drift). No kernel, no load generator, but the CPU still shares its caches with whatever else
runs: read shares, not absolute figures, and several runs. Run
``bash scripts/harness http_path_micro`` (pinned with ``taskset -c 0``); ``--profile FILE``
writes a cProfile of one mode's rounds (its call counts per request are exact under any load).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from cachefleet.runtime.config.flags import load_settings
from cachefleet.runtime.http.uvicorn_protocol import GuardedHttpToolsProtocol
from cachefleet.runtime.samples.repository import write_samples
from cachefleet.runtime.server import create_server
from harness.recording_transport import RecordingTransport
from harness.simple_wire import HEAD, simple_body

MODES = ("none", "local")


def request_bytes(seed: int) -> bytes:
    """``simple``'s request on the wire, INPUT0 filled with ``seed``."""
    body = simple_body(seed)
    return (
        b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/octet-stream\r\n"
        b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n%s"
        % (len(HEAD), len(body), body)
    )


class Connection:
    """One keep-alive connection of uvicorn's protocol to a served app."""

    def __init__(self, app: Any) -> None:
        # As ``cachefleet serve`` configures uvicorn (``serve_command``).
        config = Config(
            app, lifespan="off", proxy_headers=False, http="httptools", access_log=False,
            server_header=False, log_config=None,
        )  # fmt: skip
        config.load()
        self.state = ServerState()
        self.protocol = GuardedHttpToolsProtocol(config, self.state, {})
        self.transport = RecordingTransport(keep=32)
        self.protocol.connection_made(self.transport)

    async def serve(self, request: bytes) -> None:
        """Send ``request`` and wait until its answer is complete."""
        count = self.state.total_requests + 1
        self.protocol.data_received(request)
        for task in list(self.state.tasks):  # an ASGI task (none for an answer below ASGI)
            await task
        if self.state.total_requests != count:
            raise RuntimeError("more answers than requests")

    def status(self) -> bytes:
        return self.transport.writes[-1 if len(self.transport.writes) < 2 else -2][:12]

    def close(self) -> None:
        self.protocol.connection_lost(None)


@asynccontextmanager
async def opened(repository: Path, mode: str) -> Any:
    """The server app for ``--cache mode`` over ``repository``, its lifespan run."""
    environ = {
        "CACHEFLEET_MODEL_REPOSITORY": str(repository),
        "CACHEFLEET_CACHE": mode,
        "CACHEFLEET_GRPC_PORT": "0",
        "CACHEFLEET_LOG_LEVEL": "warning",
        # One thread per model run: ONNX Runtime's pool threads spin after each run, and the
        # CPU they spin (counted in the process's time) varied 2x between identical servers.
        "CACHEFLEET_INTRA_OP_THREADS": "1",
    }
    app: Any = create_server(load_settings(None, environ))
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    life = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the server did not start: {started}")
    try:
        yield app
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await life


def requests(kind: str) -> Iterator[bytes]:
    seed = 0
    while True:
        if kind == "miss":
            seed += 1
        yield request_bytes(seed)


async def measure(args: argparse.Namespace, repository: Path) -> list[str]:
    bodies = requests(args.kind)
    connections: dict[str, Connection] = {}
    async with AsyncExitStack() as stack:
        for mode in args.modes:
            app = await stack.enter_async_context(opened(repository, mode))
            connection = connections[mode] = Connection(app)
            for _ in range(args.warmup):  # admission decides within the first few hundred
                await connection.serve(next(bodies))
            if not connection.status().startswith(b"HTTP/1.1 200"):
                raise SystemExit(f"{mode}: {connection.transport.writes[-2:]}")
        profiler = cProfile.Profile() if args.profile else None
        per_request: dict[str, list[float]] = {mode: [] for mode in args.modes}
        order = list(connections)
        for round_ in range(args.rounds):
            for mode in order[round_ % len(order) :] + order[: round_ % len(order)]:
                connection = connections[mode]
                profiling = profiler is not None and mode == args.profile_mode
                if profiling:
                    assert profiler is not None
                    profiler.enable()
                started = time.process_time_ns()
                for _ in range(args.batch):
                    await connection.serve(next(bodies))
                per_request[mode].append((time.process_time_ns() - started) / args.batch / 1e3)
                if profiling:
                    assert profiler is not None
                    profiler.disable()
        if profiler is not None:
            profiler.dump_stats(args.profile)
        for connection in connections.values():
            connection.close()
    lines = []
    nones = per_request.get("none")
    for mode, samples in per_request.items():
        versus = ""
        if nones is not None and mode != "none":
            # Each round's modes ran next to each other: their ratio cancels the machine's drift.
            ratios = [each / none for each, none in zip(samples, nones, strict=True)]
            versus = f", {statistics.median(ratios) - 1:+.1%} over none (median of rounds)"
        lines.append(
            f"{mode:<8} {args.kind}: CPU per request min {min(samples):6.1f} us, "
            f"median {statistics.median(samples):6.1f} us{versus}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.http_path_micro")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--kind", choices=("miss", "hit"), default="miss")
    parser.add_argument("--warmup", type=int, default=3000, help="requests per mode first")
    parser.add_argument("--batch", type=int, default=300, help="requests per timed batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches per mode (rotating)")
    parser.add_argument("--profile", help="write a cProfile of one mode's rounds here")
    parser.add_argument("--profile-mode", choices=MODES, default="local")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        repository = Path(folder)
        write_samples(repository, ("simple",))
        for line in _run(measure(args, repository)):
            print(line)
    return 0


def _run(main: Any) -> list[str]:
    """On uvloop, as the server runs."""
    import uvloop

    return uvloop.run(main)


if __name__ == "__main__":
    raise SystemExit(main())
