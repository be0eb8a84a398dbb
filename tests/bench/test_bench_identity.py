"""`cachefleet bench --identity`: the cost of cache identity, measured without a server."""

from __future__ import annotations

import re
import subprocess
import sys

BENCH = [sys.executable, "-P", "-m", "cachefleet.cli.main", "bench", "--identity", "--quick"]


def test_identity_bench_reports_the_key_and_the_fingerprint_costs() -> None:
    result = subprocess.run(BENCH, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"key, densenet input \(602 KB\): [\d.]+ us", out), out
    assert re.search(r"key, simple input \(2 x INT32\[1,16\]\): [\d.]+ us", out), out
    assert re.search(r"fingerprint at load, densenet_onnx version 1 \(32\.\d+ MB", out), out
    assert "fingerprint at load, simple version 1" in out
