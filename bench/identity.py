"""``cachefleet bench --identity``: what cache identity costs, without a server.

Two figures: the key of a request (median microseconds for the densenet input, 602 KB, and for
a ``simple`` request, two INT32[1,16], where the fixed per-key cost shows; the fingerprint is
one more framed field of the key's head, cached per model version), and the time a load spends
fingerprinting each sample model's version 1 (every file hashed twice, around the session's
opening). The samples are written to a temporary folder first. The same key figures open
``python -m harness.cache_micro`` (the repository's harness), which adds the cache's latencies.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from cachefleet.runtime.cache.api import CacheRequest
from cachefleet.runtime.cache.key import compute_key
from cachefleet.runtime.models.fingerprint import files_digest, fingerprint
from cachefleet.runtime.samples.repository import write_samples
from cachefleet.runtime.tensor import Tensor

#: Samples whose fingerprint is timed: the largest file, and the smallest.
MODELS = ("densenet_onnx", "simple")
_ROUNDS = 2000

IMAGE_SHAPE = (3, 224, 224)
#: A model fingerprint as the repository makes them (hex BLAKE3); its value does not matter here.
FINGERPRINT = "f" * 64


def image_request(seed: int) -> CacheRequest:
    image = np.random.default_rng(seed).random(IMAGE_SHAPE, dtype=np.float32)
    tensor = Tensor.from_numpy("data_0", image)
    return CacheRequest(
        "densenet_onnx", "1", [tensor], {}, enabled=True, ttl_s=600, fingerprint=FINGERPRINT
    )


def simple_request(seed: int) -> CacheRequest:
    first = Tensor.from_numpy("INPUT0", np.full((1, 16), seed, dtype=np.int32))
    second = Tensor.from_numpy("INPUT1", np.ones((1, 16), dtype=np.int32))
    return CacheRequest(
        "simple", "1", [first, second], {}, enabled=True, ttl_s=600, fingerprint=FINGERPRINT
    )


def key_throughput(rounds: int) -> tuple[float, float, float]:
    """(GB/s at the median, median and mean microseconds per key) on the densenet input.

    The median is the figure to quote: on a shared machine the mean mostly measures the
    scheduler taking the CPU away.
    """
    request = image_request(0)
    nbytes = request.inputs[0].nbytes
    samples = key_seconds(request, rounds)
    median = statistics.median(samples)
    return nbytes / median / 1e9, median * 1e6, statistics.mean(samples) * 1e6


def simple_key_us(rounds: int) -> float:
    """Median microseconds per key of a ``simple`` request (small inputs: the fixed cost)."""
    return statistics.median(key_seconds(simple_request(0), rounds)) * 1e6


def key_seconds(request: CacheRequest, rounds: int) -> list[float]:
    """Seconds each of ``rounds`` key computations of ``request`` took."""
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        compute_key(
            request.model,
            request.version,
            request.fingerprint,
            request.inputs,
            request.parameters,
        )
        samples.append(time.perf_counter() - started)
    return samples


def fingerprint_ms(model_folder: Path, rounds: int) -> tuple[float, int]:
    """(median milliseconds, bytes hashed) to fingerprint version 1 of the model in
    ``model_folder`` as a load does: every file hashed twice, around the session's opening."""
    version = model_folder / "1"
    size = sum(path.stat().st_size for path in version.rglob("*") if path.is_file())
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        files = files_digest(model_folder, version, [])
        files_digest(model_folder, version, [])
        fingerprint(b"config", files)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e3, size


def run_command(args: argparse.Namespace) -> int:
    rounds = _ROUNDS if not args.quick else 200
    gbps, median_us, _ = key_throughput(rounds)
    print(f"key, densenet input (602 KB): {median_us:.1f} us ({gbps:.2f} GB/s), median")
    print(f"key, simple input (2 x INT32[1,16]): {simple_key_us(rounds):.2f} us, median")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_samples(root, MODELS)
        for model in MODELS:
            elapsed_ms, size = fingerprint_ms(root / model, max(3, rounds // 200))
            print(
                f"fingerprint at load, {model} version 1 ({size / 1e6:.2f} MB, hashed twice): "
                f"{elapsed_ms:.2f} ms, median"
            )
    return 0
