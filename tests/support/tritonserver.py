"""The real ``tritonserver`` binary of the ``nvidia-pytriton`` wheel, run as Triton users run it:
on a model repository of their own, with Triton's flags (``--model-control-mode explicit``), not
through PyTriton.

The wheel carries the binary, the Python backend and the backend stub for each Python release;
the stub for the peer venv's Python 3.11 goes beside the backend in a backend directory made
here (as PyTriton arranges it), and the wheel's own libraries are on ``LD_LIBRARY_PATH``. The
venv is the benchmark peer's (``scripts/setup-bench-peer``, Debian's ``/usr/bin/python3.11``,
whose ``libpython`` the stub links); its site-packages give the models numpy. The models of the
tests are Python-backend models (``model.py``): the wheel has no ONNX Runtime backend.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cachefleet.bench import triton_peer
from cachefleet.bench.processes import ManagedProcess, free_ports, http_ok


@dataclass
class Tritonserver:
    """A started tritonserver: the process, and its HTTP and gRPC ``host:port``."""

    process: ManagedProcess
    http: str
    grpc: str

    def stop(self) -> None:
        self.process.stop()


def site_packages() -> Path:
    """The peer venv's site-packages (where the wheel is installed)."""
    found = sorted((triton_peer.DEFAULT_VENV / "lib").glob("python3*/site-packages"))
    if not found or not (found[0] / "pytriton" / "tritonserver").is_dir():
        raise FileNotFoundError(
            f"no nvidia-pytriton in {triton_peer.DEFAULT_VENV}: bash scripts/setup-bench-peer"
        )
    return found[0].resolve()


def start(
    repository: Path, logdir: Path, args: Sequence[str] = (), *, ready_model: str | None = None
) -> Tritonserver:
    """``tritonserver --model-repository repository`` plus ``args``, on free loopback ports;
    returns once the server (and ``ready_model``, if named) is ready."""
    packages = site_packages()
    wheel = packages / "pytriton" / "tritonserver"
    backends = logdir / "backends"
    python_backend = backends / "python"
    python_backend.mkdir(parents=True, exist_ok=True)
    for item in (wheel / "backends" / "python").iterdir():
        if item.is_file():
            shutil.copy(item, python_backend / item.name)
    shutil.copy(
        wheel / "python_backend_stubs" / "3.11" / "triton_python_backend_stub",
        python_backend / "triton_python_backend_stub",
    )
    http, grpc, metrics = free_ports(3)
    command = [
        str(wheel / "bin" / "tritonserver"), "--model-repository", str(repository),
        "--backend-directory", str(backends), "--cache-directory", str(wheel / "caches"),
        "--http-address", "127.0.0.1", "--http-port", str(http),
        "--grpc-address", "127.0.0.1", "--grpc-port", str(grpc),
        "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics), *args,
    ]  # fmt: skip
    venv_bin = triton_peer.DEFAULT_VENV.resolve() / "bin"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(packages / "nvidia_pytriton.libs"),
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(packages),
    }
    process = ManagedProcess("tritonserver", command, logdir / f"tritonserver-{http}.log", env)
    base = f"http://127.0.0.1:{http}"
    probe = f"{base}/v2/models/{ready_model}/ready" if ready_model else f"{base}/v2/health/ready"
    process.wait_until(http_ok(probe), 180)
    return Tritonserver(process, f"127.0.0.1:{http}", f"127.0.0.1:{grpc}")
