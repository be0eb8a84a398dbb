"""Start the peer, KServe's Python model server, on the same ONNX file as ours.

The peer lives in its own venv (``scripts/setup-bench-peer`` installs it under
``.cache/kserve-peer``) because kserve pins its own web stack. It gets the same CPU as our
server, so the comparison is like for like.
"""

from __future__ import annotations

import os
import subprocess
from importlib import resources
from pathlib import Path

from cachefleet.bench.errors import BenchError
from cachefleet.bench.pinning import pinned
from cachefleet.bench.processes import ManagedProcess, free_port, http_ok

DEFAULT_VENV = Path(".cache/kserve-peer")


def default_python() -> Path:
    return DEFAULT_VENV / "bin" / "python"


def start(
    repository: Path,
    model: str,
    python: Path | None,
    logdir: Path,
    cpus: str | None,
) -> tuple[ManagedProcess, str]:
    """The peer serving ``repository/model/1/model.onnx``; returns it and its base URL."""
    python = python or default_python()
    if not python.exists():
        raise BenchError(
            f"the KServe peer is not installed ({python} is missing): bash "
            "scripts/setup-bench-peer installs it from a checkout, or --peer-python names "
            "the python of a venv that has it"
        )
    port = free_port()
    script = resources.files("cachefleet.bench").joinpath("kserve_peer_model.py")
    model_file = repository / model / "1" / "model.onnx"
    with resources.as_file(script) as script_path:
        command = [
            str(python), "-I", str(script_path), "--model-file", str(model_file),
            "--name", model, "--port", str(port),
        ]  # fmt: skip
        process = ManagedProcess(
            "kserve peer", pinned(command, cpus), logdir / f"kserve-{port}.log", dict(os.environ)
        )
    base_url = f"http://127.0.0.1:{port}"
    process.wait_until(http_ok(f"{base_url}/v2/models/{model}/ready"), 120)
    return process, base_url


def describe(python: Path | None) -> str:
    """What the peer is, for the report: its kserve and onnxruntime versions."""
    command = [
        str(python or default_python()), "-I", "-c",
        "import importlib.metadata as m; print(m.version('kserve'), m.version('onnxruntime'))",
    ]  # fmt: skip
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    versions = completed.stdout.split() or ["?", "?"]
    return (
        f"kserve {versions[0]} ModelServer, 1 worker, a custom Model running an onnxruntime "
        f"{versions[-1]} session on the same ONNX file; per-request access and latency logs "
        "off, as ours has none"
    )
