"""Bursts of identical densenet requests on a fleet of servers sharing one Redis, with fleet
coalescing on (``auto``) and ``off``: model executions per burst (summed
``nv_inference_exec_count``) and the seconds until the burst's last answer.

``bash scripts/harness fleet_burst [--servers 4] [--per-server 3] [--bursts 5]`` prints a
Markdown table. Each burst uses a new input (a cold key, as after a rollout or a
flush); the servers are started once per mode and warmed up with one request each.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np
import orjson

from cachefleet.bench.processes import CACHEFLEET, RedisServer, ServerProcess

MODEL = "densenet_onnx"
_EXECUTIONS = re.compile(rf'^nv_inference_exec_count{{model="{MODEL}",version="1"}} (\S+)$', re.M)


def densenet_body(seed: int) -> tuple[bytes, int]:
    """A binary-extension request for ``densenet_onnx`` (its bytes, its JSON header's length)."""
    image = np.random.default_rng(seed).random((3, 224, 224), dtype=np.float32)
    head = orjson.dumps({
        "inputs": [{"name": "data_0", "datatype": "FP32", "shape": [3, 224, 224],
                    "parameters": {"binary_data_size": image.nbytes}}],
        "outputs": [{"name": "fc6_1", "parameters": {"binary_data": True}}],
    })  # fmt: skip
    return head + image.tobytes(), len(head)


@functools.cache
def _client() -> httpx.Client:
    """One client for the run: a top-level ``httpx.post`` reads the CA bundle on every call,
    which on a busy machine would stretch the burst it measures."""
    return httpx.Client(timeout=120, limits=httpx.Limits(max_connections=None))


def executions(server: ServerProcess) -> int:
    found = _EXECUTIONS.search(_client().get(f"{server.base_url}/metrics", timeout=60).text)
    return int(float(found.group(1))) if found else 0


def post(server: ServerProcess, body: tuple[bytes, int], *, store: bool = True) -> None:
    content, header_length = body
    headers = {"Inference-Header-Content-Length": str(header_length)}
    if not store:
        headers["Cache-Control"] = "no-store"
    url = f"{server.base_url}/v2/models/{MODEL}/infer"
    response = _client().post(url, content=content, headers=headers)
    response.raise_for_status()


def burst(servers: list[ServerProcess], per_server: int, body: tuple[bytes, int]) -> float:
    """Seconds from the release of every request at once to the last answer."""
    targets = [server for server in servers for _ in range(per_server)]
    gate = threading.Barrier(len(targets) + 1)

    def one(server: ServerProcess) -> None:
        gate.wait()
        post(server, body)

    with ThreadPoolExecutor(len(targets)) as pool:
        sent = [pool.submit(one, server) for server in targets]
        gate.wait()
        started = time.monotonic()
        for each in sent:
            each.result()
        return time.monotonic() - started


def run_mode(mode: str, args: argparse.Namespace, repository: Path, work: Path) -> list[str]:
    with ExitStack() as stack:
        redis = RedisServer(Path(tempfile.mkdtemp(dir=work)))
        redis.start()
        stack.callback(redis.stop)
        flags = ["--model-repository", str(repository), "--cache", "redis",
                 "--redis-url", redis.url, "--cache-fleet-coalescing", mode,
                 "--model-control-mode", "explicit", "--load-model", MODEL,
                 "--log-level", "warning"]  # fmt: skip
        servers = [ServerProcess(flags, work) for _ in range(args.servers)]
        for server in servers:
            stack.callback(server.stop)
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(), servers))
        for server in servers:  # warm ONNX Runtime up, uncached
            post(server, densenet_body(10_000), store=False)
        runs, seconds = [], []
        for index in range(args.bursts):
            before = sum(executions(server) for server in servers)
            seconds.append(burst(servers, args.per_server, densenet_body(index)))
            runs.append(sum(executions(server) for server in servers) - before)
        requests = args.servers * args.per_server
        return [
            f"| {mode} | {args.servers} x {args.per_server} = {requests} | "
            f"{statistics.mean(runs):.2f} (max {max(runs)}) | "
            f"{statistics.median(seconds):.2f} (max {max(seconds):.2f}) |"
        ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Bursts of identical densenet requests on servers sharing one Redis, "
        "fleet coalescing auto and off."
    )
    parser.add_argument("--servers", type=int, default=4, help="servers (4)")
    parser.add_argument("--per-server", type=int, default=3, help="requests per server (3)")
    parser.add_argument("--bursts", type=int, default=5, help="bursts per mode, new keys (5)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        repository = work / "models"
        subprocess.run([*CACHEFLEET, "samples", str(repository)], check=True)
        rows = ["| coalescing | requests per burst | model executions per burst | "
                "seconds to the last answer, median |", "|---|---|---|---|"]  # fmt: skip
        for mode in ("auto", "off"):
            rows += run_mode(mode, args, repository, work)
    print("\n".join(rows))


if __name__ == "__main__":
    main()
