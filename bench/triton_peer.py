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
from importlib import resources
from pathlib import Path

from cachefleet.bench.errors import BenchError
from cachefleet.bench.pinning import pinned
from cachefleet.bench.processes import ManagedProcess, free_port, http_ok

DEFAULT_VENV = Path(".cache/triton-peer")
#: Triton's response cache as large as our local tier's default (256 MiB).
CACHE_BYTES = 256 * 2**20


def default_python() -> Path:
    return DEFAULT_VENV / "bin" / "python"


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
    python = python or default_python()
    if not python.exists():
        raise BenchError(
            f"the Triton peer is not installed ({python} is missing): bash "
            "scripts/setup-bench-peer installs it from a checkout, or --triton-python names "
            "the python of a venv that has it"
        )
    http, grpc, metrics = free_port(), free_port(), free_port()
    script = resources.files("cachefleet.bench").joinpath("triton_peer_model.py")
    with resources.as_file(script) as script_path:
        command = [
            str(python), "-I", str(script_path), "--repository", str(repository),
            "--models", *models, "--http-port", str(http), "--grpc-port", str(grpc),
            "--metrics-port", str(metrics), "--cache-bytes", str(CACHE_BYTES),
            "--intra-op-threads", "1",
        ]  # fmt: skip
        if access_token_file is not None:
            command += ["--access-token-file", str(access_token_file)]
        process = ManagedProcess(
            "triton peer", pinned(command, cpus), logdir / f"triton-{http}.log", dict(os.environ)
        )
    base_url = f"http://127.0.0.1:{http}"
    for model in models:
        process.wait_until(http_ok(f"{base_url}/v2/models/{model}/ready"), 180)
    return process, base_url, f"http://127.0.0.1:{metrics}/metrics", f"127.0.0.1:{grpc}"


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
