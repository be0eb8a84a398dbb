"""Micro-benchmarks of the response cache at its API (no HTTP, no model).

Measures what the cache itself costs: BLAKE3 key hashing of the densenet input (3x224x224
FP32, 602 KB) and of a ``simple`` request (two INT32[1,16], where the fixed cost of a key shows),
and the latency of ``get_or_compute`` for a local hit, a Redis hit and a miss (with a compute
that returns at once, so the figure is pure cache overhead: key, lookups, local insert,
write-behind enqueue). With ``--model-folder``, also the time a load spends fingerprinting that
model's version 1 (its files and config, hashed twice: before and after the session opens).
Run ``python -m harness.cache_micro`` from the repository root (``bash scripts/harness
cache_micro``); it starts its own ``redis-server`` on a free
loopback port unless ``--redis-url`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from cachefleet.bench.identity import (
    fingerprint_ms,
    image_request,
    key_throughput,
    simple_key_us,
    simple_request,
)
from cachefleet.bench.processes import RedisServer
from cachefleet.runtime.cache.api import CacheDirectives, CacheRequest, CacheStatus
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.tensor import Tensor

OUTPUT = Tensor.from_numpy("fc6_1", np.linspace(0, 1, 1000, dtype=np.float32).reshape(1000, 1, 1))


async def compute() -> list[Tensor]:
    return [OUTPUT]


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


async def cache_for(mode: str, redis_url: str | None) -> ReadThroughCache:
    settings = RuntimeSettings.model_validate(
        {
            "cache": {"mode": mode, "local_size_bytes": 2**30, "admission": "always"},
            "redis": {"url": redis_url},
        }
    )
    cache = build_cache(settings, RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    await cache.start()
    return cache


async def run_latencies(
    redis_url: str, rounds: int, make: Callable[[int], CacheRequest], label: str
) -> list[str]:
    """p50/p99 of a local hit, a Redis hit and misses for requests built by ``make``."""
    directives = CacheDirectives()
    requests = [make(seed) for seed in range(rounds + 1)]  # [0]: the one that hits
    lines = []

    def asking(cache: ReadThroughCache, offset: int) -> Callable[[int], Awaitable[CacheStatus]]:
        async def call(index: int) -> CacheStatus:
            request = requests[index + offset if offset else 0]
            status = (await cache.get_or_compute(request, directives, compute))[1]
            await cache.writes.join()  # keep write-behind work out of the next sample
            return status

        return call

    local = await cache_for("local", None)
    await asking(local, 0)(0)
    hits = await latencies(asking(local, 0), rounds, CacheStatus.HIT_LOCAL)
    lines.append(summary(f"{label}: local hit", hits))
    misses = await latencies(asking(local, 1), rounds, CacheStatus.MISS)
    lines.append(summary(f"{label}: miss, local", misses))
    await local.close()

    shared = await cache_for("redis", redis_url)
    await asking(shared, 0)(0)
    hits = await latencies(asking(shared, 0), rounds, CacheStatus.HIT_REDIS)
    lines.append(summary(f"{label}: redis hit", hits))
    await shared.close()

    both = await cache_for("tiered", redis_url)
    misses = await latencies(asking(both, 1), rounds, CacheStatus.MISS)
    lines.append(summary(f"{label}: miss, tiered (GET + SET)", misses))
    await both.close()
    shared = await cache_for("redis", redis_url)
    await shared.flush(requests[0].model)
    await shared.close()
    return lines


@contextmanager
def redis_server(url: str | None) -> Iterator[str]:
    """``url``, or a throwaway Redis of our own for the run."""
    if url is not None:
        yield url
        return
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server not found: install it or pass --redis-url")
    with tempfile.TemporaryDirectory() as workdir:
        redis = RedisServer(Path(workdir))
        redis.start()
        try:
            yield redis.url
        finally:
            redis.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.cache_micro")
    parser.add_argument("--rounds", type=int, default=2000, help="samples per figure")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument(
        "--model-folder", type=Path, help="also time fingerprinting this model's version 1"
    )
    args = parser.parse_args(argv)
    gbps, median_us, mean_us = key_throughput(args.rounds)
    print(
        f"key hashing, densenet input (602 KB): {gbps:.2f} GB/s at the median "
        f"({median_us:.1f} us/key; mean {mean_us:.1f} us)"
    )
    print(f"key hashing, simple input (2 x INT32[1,16]): {simple_key_us(args.rounds):.2f} us/key")
    if args.model_folder is not None:
        elapsed_ms, size = fingerprint_ms(args.model_folder, max(3, args.rounds // 200))
        print(
            f"fingerprint at load, {args.model_folder.name} version 1 ({size / 1e6:.1f} MB, "
            f"hashed twice): {elapsed_ms:.1f} ms"
        )
    with redis_server(args.redis_url) as url:
        for make, label in ((image_request, "densenet"), (simple_request, "simple")):
            for line in asyncio.run(run_latencies(url, args.rounds, make, label)):
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
