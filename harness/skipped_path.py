"""What a cache costs a model for which admission skips every tier, in process.

With ``--cache-admission auto`` a model whose answers never repeat (or whose computation is
cheaper than a lookup) has every tier skipped, and should then cost what it costs without a
cache. This measures how close it comes: the HTTP application (the real infer endpoint, the
real service, ONNX Runtime on the sample ``simple``) over a runtime per cache mode, all in one
process, each request a new input (0% repeats), in alternating batches so that the machine's
noise falls on every mode alike. It reports the median microseconds per request of each mode
and, for each cached mode, the time its ``get_or_compute`` takes beyond the computation and
how much of that is the cache key. No sockets, no uvicorn: what differs between the modes is
the cache's own work.

Run ``bash scripts/harness skipped_path`` (it starts its own ``redis-server`` on a free
loopback port for the ``redis`` and ``tiered`` modes unless ``--redis-url`` is given).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from cachefleet.runtime.cache.api import CacheAnswer, CacheDirectives, CacheRequest
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.composition import Runtime, RuntimeSlot
from cachefleet.runtime.config.flags import load_settings
from cachefleet.runtime.http.app import create_app
from cachefleet.runtime.samples.repository import write_samples
from harness.cache_micro import redis_server
from harness.simple_wire import HEAD, simple_body

MODES = ("none", "local", "redis", "tiered")


class CacheTimes:
    """Wraps a runtime's ``get_or_compute`` (and its key): time in it, time in the compute."""

    def __init__(self, cache: ReadThroughCache) -> None:
        self.calls = 0
        self.total_s = self.compute_s = self.key_s = 0.0
        get_or_compute, key = cache.get_or_compute, cache.walk.key

        async def timed_get(
            request: CacheRequest,
            directives: CacheDirectives,
            compute: Callable[[], Awaitable[Any]],
        ) -> CacheAnswer:
            async def timed_compute() -> Any:
                started = time.perf_counter()
                try:
                    return await compute()
                finally:
                    self.compute_s += time.perf_counter() - started

            started = time.perf_counter()
            answer = await get_or_compute(request, directives, timed_compute)
            self.total_s += time.perf_counter() - started
            self.calls += 1
            return answer

        def timed_key(request: CacheRequest) -> Any:
            started = time.perf_counter()
            try:
                return key(request)
            finally:
                self.key_s += time.perf_counter() - started

        cache.get_or_compute = timed_get  # type: ignore[method-assign]
        cache.walk.key = timed_key  # type: ignore[method-assign]

    def line(self, mode: str) -> str:
        per = 1e6 / max(1, self.calls)
        beyond = (self.total_s - self.compute_s) * per
        key = self.key_s * per
        return f"{mode:<8} get_or_compute beyond the compute {beyond:6.1f} us, key {key:5.1f} us"


def requests() -> Iterator[bytes]:
    """``simple`` requests, each with a new INPUT0 (never a repeat)."""
    seed = 0
    while True:
        seed += 1
        yield simple_body(seed)


async def serve_one(app: Any, body: bytes) -> None:
    headers = [
        (b"content-length", b"%d" % len(body)),
        (b"inference-header-content-length", b"%d" % len(HEAD)),
    ]
    scope = {"type": "http", "method": "POST", "path": "/v2/models/simple/infer",
             "headers": headers, "query_string": b"", "root_path": ""}  # fmt: skip
    messages = [{"type": "http.request", "body": body, "more_body": False}]
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        """The body, then nothing more, as from a client that stays connected (a request that
        waits for the model watches for a hang-up with receive)."""
        if messages:
            return messages.pop()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: the wait above ends only by cancellation")

    async def send(sent: dict[str, Any]) -> None:
        if sent["type"] == "http.response.start":
            statuses.append(sent["status"])

    await app(scope, receive, send)
    if statuses != [200]:
        raise RuntimeError(f"the server answered {statuses}")


async def measure(args: argparse.Namespace, repository: Path, redis_url: str) -> list[str]:
    bodies = requests()
    apps: dict[str, Any] = {}
    runtimes: dict[str, Runtime] = {}
    timings: dict[str, CacheTimes] = {}
    async with AsyncExitStack() as stack:
        for mode in args.modes:
            settings = load_settings(
                None,
                {
                    "CACHEFLEET_MODEL_REPOSITORY": str(repository),
                    "CACHEFLEET_CACHE": mode,
                    "CACHEFLEET_CACHE_ADMISSION": args.cache_admission,
                    "CACHEFLEET_REDIS_URL": redis_url,
                },
            )
            slot = RuntimeSlot(settings)
            app = create_app(slot)
            runtime = await stack.enter_async_context(Runtime.open(settings))
            slot.runtime = runtime
            for _ in range(args.warmup):  # admission decides within the first few hundred
                await serve_one(app, next(bodies))
            if isinstance(runtime.cache, ReadThroughCache):
                timings[mode] = CacheTimes(runtime.cache)
            apps[mode] = app
            runtimes[mode] = runtime
        per_request: dict[str, list[float]] = {mode: [] for mode in args.modes}
        for _ in range(args.rounds):
            for mode, app in apps.items():
                started = time.perf_counter()
                for _ in range(args.batch):
                    await serve_one(app, next(bodies))
                per_request[mode].append((time.perf_counter() - started) / args.batch * 1e6)
        lines = []
        baseline = statistics.median(per_request["none"]) if "none" in per_request else None
        for mode, samples in per_request.items():
            median = statistics.median(samples)
            versus = f" ({median / baseline - 1:+.0%} over none)" if baseline else ""
            admission = runtimes[mode].admission
            decision = ", ".join(
                f"{tier} {'admitted' if admission.admitted('simple', tier, '1') else 'skipped'}"
                for tier in admission.tiers
            )
            decision = f"; {decision}" if decision else ""
            lines.append(f"{mode:<8} {median:6.1f} us per request{versus}{decision}")
        lines += [timings[mode].line(mode) for mode in timings]
        return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.skipped_path")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument("--cache-admission", choices=("auto", "always"), default="auto")
    parser.add_argument("--warmup", type=int, default=4000, help="requests per mode first")
    parser.add_argument("--batch", type=int, default=1000, help="requests per timed batch")
    parser.add_argument("--rounds", type=int, default=12, help="batches per mode")
    parser.add_argument("--redis-url", help="an existing Redis (default: one of our own)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, redis_server(args.redis_url) as url:
        repository = Path(folder)
        write_samples(repository, ("simple",))
        for line in _run(measure(args, repository, url)):
            print(line)
    return 0


def _run(main: Awaitable[list[str]]) -> list[str]:
    """On uvloop, as the server runs, when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)  # type: ignore[arg-type]
    return uvloop.run(main)  # type: ignore[arg-type]


if __name__ == "__main__":
    raise SystemExit(main())
