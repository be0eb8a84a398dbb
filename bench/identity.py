"""``cachefleet bench --identity``: what cache identity costs, without a server.

Two figures: the key of a request (median microseconds for the densenet input, 602 KB, and for
a ``simple`` request, two INT32[1,16], where the fixed per-key cost shows; the fingerprint is
one more framed field of the key's head, cached per model version), and the time a load spends
fingerprinting each sample model's version 1 (every file hashed twice, around the session's
opening). The samples are written to a temporary folder first.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from cachefleet.bench.cache_micro import fingerprint_ms, key_throughput, simple_key_us
from cachefleet.runtime.samples.repository import write_samples

#: Samples whose fingerprint is timed: the largest file, and the smallest.
MODELS = ("densenet_onnx", "simple")
_ROUNDS = 2000


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
