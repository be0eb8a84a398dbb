"""A regression guard, not a benchmark: after a burst of large and malformed requests the
server's resident memory (from /proc) stays under a generous fixed ceiling, so bodies, decoded
tensors and refused requests are not kept."""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
from support.processes import ServerProcess

LIMIT = 8 * 1024 * 1024
#: Resident memory the server may grow by during the burst (its baseline holds every model).
GROWTH_CEILING = 600 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc")


def densenet(seed: int) -> tuple[bytes, dict[str, str]]:
    image = np.random.default_rng(seed).random((3, 224, 224), dtype=np.float32)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "data_0",
                    "datatype": "FP32",
                    "shape": [3, 224, 224],
                    "parameters": {"binary_data_size": image.nbytes},
                }
            ]
        }
    ).encode()
    return header + image.tobytes(), {"Inference-Header-Content-Length": str(len(header))}


def burst() -> list[tuple[str, bytes, dict[str, str], int]]:
    """(model, body, headers, expected status) of every request in the burst."""
    big = LIMIT - 4096
    wrong_size = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [8, 16],
         "parameters": {"binary_data_size": big // 2}},
        {"name": "INPUT1", "datatype": "INT32", "shape": [8, 16],
         "parameters": {"binary_data_size": big // 2}},
    ]}).encode()  # fmt: skip
    huge_data = json.dumps({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [8, 16], "data": [7] * (big // 3)},
        {"name": "INPUT1", "datatype": "INT32", "shape": [8, 16], "data": [7] * 128},
    ]}).encode()  # fmt: skip
    requests: list[tuple[str, bytes, dict[str, str], int]] = []
    for round_ in range(6):
        header = {"Inference-Header-Content-Length": str(len(wrong_size))}
        requests += [
            ("simple", wrong_size + bytes(big - big % 2), header, 400),
            ("simple", huge_data, {}, 400),
            ("simple", b"[" * big, {}, 400),
            ("simple", bytes(LIMIT + 1), {}, 413),
            ("densenet_onnx", *densenet(round_), 200),
        ]
    return requests


def test_memory_stays_bounded_after_a_burst_of_large_bad_requests(
    make_server: Callable[..., ServerProcess],
) -> None:
    server = make_server("--max-request-size", str(LIMIT))
    assert server.process is not None
    with httpx.Client(base_url=server.base_url, timeout=120) as client:
        assert client.post("/v2/models/densenet_onnx/infer", content=densenet(99)[0],
                           headers=densenet(99)[1]).status_code == 200  # fmt: skip
        baseline = rss_bytes(server.process.pid)

        def send(request: tuple[str, bytes, dict[str, str], int]) -> tuple[int, int]:
            model, body, headers, expected = request
            response = client.post(f"/v2/models/{model}/infer", content=body, headers=headers)
            return response.status_code, expected

        for _ in range(2):
            with ThreadPoolExecutor(4) as pool:
                outcomes = list(pool.map(send, burst()))
            assert [got for got, _ in outcomes] == [want for _, want in outcomes]
        after = rss_bytes(server.process.pid)
        assert client.get("/v2/health/live").status_code == 200
    print(f"RSS {baseline / 2**20:.0f} MiB before the burst, {after / 2**20:.0f} MiB after")
    assert after - baseline < GROWTH_CEILING
    assert after < 2 * GROWTH_CEILING
