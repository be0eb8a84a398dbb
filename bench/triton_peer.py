"""Start the Triton peer: the ``tritonserver`` binary of the ``nvidia-pytriton`` wheel, with its
local response cache, serving the sample models under their own names.

The peer lives in its own venv (``scripts/setup-bench-peer`` installs it under
``.cache/triton-peer``, made with Debian's ``/usr/bin/python3.11``: the Python backend stub
links the system libpython, and another 3.11 build fails to load models). It is pinned to the
same CPU as our server, and its whole process tree (the PyTriton process, ``tritonserver``
and the backend stubs) is charged for CPU time, as ours is.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from cachefleet.bench.errors import BenchError
from cachefleet.bench.pinning import pinned
from cachefleet.bench.processes import ManagedProcess, free_ports, http_ok

DEFAULT_VENV = Path(".cache/triton-peer")
#: Triton's response cache as large as our local tier's default (256 MiB).
CACHE_BYTES = 256 * 2**20


def default_python() -> Path:
    return DEFAULT_VENV / "bin" / "python"


@dataclass(frozen=True)
class TritonPeer:
    """A launched peer: its process and where it answers (HTTP, metrics, gRPC ``host:port``)."""

    process: ManagedProcess
    base_url: str
    metrics_url: str
    grpc_address: str

    def wait_ready(self, models: Sequence[str], timeout_s: float = 180) -> None:
        """Until every one of ``models`` is ready (or the process is stopped and this raises)."""
        for model in models:
            self.process.wait_until(http_ok(f"{self.base_url}/v2/models/{model}/ready"), timeout_s)


def start(
    repository: Path,
    models: Sequence[str],
    python: Path | None,
    logdir: Path,
    cpus: str | None,
    *,
    access_token_file: Path | None = None,
) -> tuple[ManagedProcess, str, str, str]:
    """The peer serving ``models``; returns it, its HTTP base URL, its metrics URL and the
    ``host:port`` of its gRPC endpoint. ``access_token_file``: the token of its restricted
    endpoints (the repository index among them), else a random one."""
    peer = launch(repository, models, python, logdir, cpus, access_token_file=access_token_file)
    peer.wait_ready(models)
    return peer.process, peer.base_url, peer.metrics_url, peer.grpc_address


def launch(
    repository: Path,
    models: Sequence[str],
    python: Path | None,
    logdir: Path,
    cpus: str | None,
    *,
    access_token_file: Path | None = None,
    cache_bytes: int | None = CACHE_BYTES,
) -> TritonPeer:
    """The peer's process, started but not waited for (several start side by side: each takes
    seconds to load its models). ``cache_bytes``: its local response cache, None for none at
    all (neither the server's cache nor any model's ``response_cache``)."""
    python = python or default_python()
    if not python.exists():
        raise BenchError(
            f"the Triton peer is not installed ({python} is missing): bash "
            "scripts/setup-bench-peer installs it from a checkout, or --triton-python names "
            "the python of a venv that has it"
        )
    http, grpc, metrics = free_ports(3)
    script = resources.files("cachefleet.bench").joinpath("triton_peer_model.py")
    with resources.as_file(script) as script_path:
        command = [
            str(python), "-I", str(script_path), "--repository", str(repository),
            "--models", *models, "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", str(metrics), "--intra-op-threads", "1",
        ]  # fmt: skip
        command += ["--no-cache"] if cache_bytes is None else ["--cache-bytes", str(cache_bytes)]
        if access_token_file is not None:
            command += ["--access-token-file", str(access_token_file)]
        process = ManagedProcess(
            "triton peer", pinned(command, cpus), logdir / f"triton-{http}.log", dict(os.environ)
        )
    return TritonPeer(
        process,
        f"http://127.0.0.1:{http}",
        f"http://127.0.0.1:{metrics}/metrics",
        f"127.0.0.1:{grpc}",
    )


def describe(python: Path | None) -> str:
    """What the peer is, for the report: the wheel's and onnxruntime's versions."""
    command = [
        str(python or default_python()), "-I", "-c",
        "import importlib.metadata as m; "
        "print(m.version('nvidia-pytriton'), m.version('onnxruntime'))",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    versions = completed.stdout.split() or ["?", "?"]
    return (
        f"Triton: the tritonserver binary of nvidia-pytriton {versions[0]} with its local "
        f"response cache ({CACHE_BYTES // 2**20} MiB, response_cache on per model), HTTP and "
        "gRPC front ends, same CPU pinning and load; each model is a PyTriton Python function "
        f"running an onnxruntime {versions[-1]} session on the same ONNX file. Hits never reach "
        "that function; misses go through the Python backend and PyTriton's inter-process hop, so "
        "Triton's miss figures say little about Triton's own ONNX Runtime backend"
    )
