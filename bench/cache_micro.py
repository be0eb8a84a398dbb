"""Micro-benchmarks of the response cache at its API (no HTTP, no model).

Measures what the cache itself costs: BLAKE3 key hashing of the densenet input (3x224x224
FP32, 602 KB), and the latency of ``get_or_compute`` for a local hit, a Redis hit and a miss
(with a compute that returns at once, so the figure is pure cache overhead: key, lookups,
local insert, write-behind enqueue). Run ``python -m cachefleet.bench.cache_micro``; it starts
its own ``redis-server`` on a free loopback port unless ``--redis-url`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import numpy as np

from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.key import compute_key
from cachefleet.runtime.cache.tiered import TieredCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

IMAGE_SHAPE = (3, 224, 224)
OUTPUT = Tensor.from_numpy("fc6_1", np.linspace(0, 1, 1000, dtype=np.float32).reshape(1000, 1, 1))


def image_request(seed: int) -> CacheRequest:
    image = np.random.default_rng(seed).random(IMAGE_SHAPE, dtype=np.float32)
    tensor = Tensor.from_numpy("data_0", image)
    return CacheRequest("densenet_onnx", "1", [tensor], {}, enabled=True, ttl_s=600)


async def compute() -> list[Tensor]:
    return [OUTPUT]


def key_throughput(rounds: int) -> tuple[float, float]:
    """(GB/s, microseconds per key) of compute_key on the densenet input."""
    request = image_request(0)
    nbytes = request.inputs[0].nbytes
    started = time.perf_counter()
    for _ in range(rounds):
        compute_key(request.model, request.version, request.inputs, request.parameters)
    elapsed = time.perf_counter() - started
    return nbytes * rounds / elapsed / 1e9, elapsed / rounds * 1e6


async def latencies(
    call: Callable[[int], Awaitable[CacheStatus]], rounds: int, expect: CacheStatus
) -> list[float]:
    samples = []
    for index in range(rounds):
        started = time.perf_counter()
        status = await call(index)
        samples.append(time.perf_counter() - started)
        if status is not expect:
            raise RuntimeError(f"expected {expect}, got {status}")
    return samples


def summary(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1e6
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e6
    return f"{name:<34} p50 {p50:8.1f} us   p99 {p99:8.1f} us   (n={len(ordered)})"


async def cache_for(mode: str, redis_url: str | None) -> TieredCache:
    settings = RuntimeSettings.model_validate(
        {"cache": {"mode": mode, "local_size_bytes": 2**30}, "redis": {"url": redis_url}}
    )
    cache = build_cache(settings, RuntimeMetrics())
    assert isinstance(cache, TieredCache)
    await cache.start()
    return cache


async def run_latencies(redis_url: str, rounds: int) -> list[str]:
    directives = CacheDirectives()
    requests = [image_request(seed) for seed in range(rounds + 1)]  # [0]: the hit
    lines = []

    local = await cache_for("local", None)
    await local.get_or_compute(requests[0], directives, compute)

    async def local_hit(index: int) -> CacheStatus:
        return (await local.get_or_compute(requests[0], directives, compute))[1]

    lines.append(
        summary(
            "local hit (densenet, key included)",
            await latencies(local_hit, rounds, CacheStatus.HIT_LOCAL),
        )
    )

    async def local_miss(index: int) -> CacheStatus:
        return (await local.get_or_compute(requests[index + 1], directives, compute))[1]

    lines.append(summary("miss, local mode", await latencies(local_miss, rounds, CacheStatus.MISS)))
    await local.close()

    shared = await cache_for("redis", redis_url)
    await shared.get_or_compute(requests[0], directives, compute)
    await shared.writes.join()

    async def redis_hit(index: int) -> CacheStatus:
        return (await shared.get_or_compute(requests[0], directives, compute))[1]

    lines.append(
        summary(
            "redis hit (densenet, key included)",
            await latencies(redis_hit, rounds, CacheStatus.HIT_REDIS),
        )
    )
    await shared.close()

    both = await cache_for("tiered", redis_url)

    async def tiered_miss(index: int) -> CacheStatus:
        status = (await both.get_or_compute(requests[index + 1], directives, compute))[1]
        await both.writes.join()  # keep the write-behind from piling up between samples
        return status

    lines.append(
        summary(
            "miss, tiered (GET, SET awaited)",
            await latencies(tiered_miss, rounds, CacheStatus.MISS),
        )
    )
    await both.close()
    return lines


@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it or pass --redis-url")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as workdir:
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cachefleet.bench.cache_micro")
    parser.add_argument("--rounds", type=int, default=2000, help="samples per figure")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    args = parser.parse_args(argv)
    gbps, per_key_us = key_throughput(args.rounds)
    print(
        f"{'key hashing, densenet input (602 KB)':<34} {gbps:6.2f} GB/s   {per_key_us:8.1f} us/key"
    )
    with redis_server(args.redis_url) as url:
        for line in asyncio.run(run_latencies(url, args.rounds)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
