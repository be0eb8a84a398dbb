"""The processes of the upstream run: real Triton (the benchmark's peer) and cachefleet in front.

Triton is the ``tritonserver`` of the ``nvidia-pytriton`` wheel, started as the benchmark's
peer is (:mod:`cachefleet.bench.triton_peer`), with its local response cache or with none at
all. PyTriton puts its repository endpoints behind a token, so each front reads the token from
a file (``--upstream-auth-file``) and names the models (``--upstream-models``: PyTriton's index
lists none), as a user in front of PyTriton would.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Sequence
from pathlib import Path

from cachefleet.bench import triton_peer
from cachefleet.bench.measure import Target
from cachefleet.bench.processes import ServerProcess
from cachefleet.bench.triton_peer import TritonPeer

#: PyTriton's token header over gRPC (``triton-grpc-protocol-`` + its HTTP header's name).
TOKEN_HEADER = "triton-grpc-protocol-triton-access-token"


def token_file(workdir: Path) -> Path:
    """A fresh access token for every Triton of the run, in a file the fronts read."""
    path = workdir / "triton-token"
    path.write_text(secrets.token_urlsafe(24) + "\n")
    return path


def launch_triton(
    stack: contextlib.ExitStack,
    repository: Path,
    models: Sequence[str],
    python: Path | None,
    workdir: Path,
    cpus: str | None,
    cache_bytes: int | None,
) -> TritonPeer:
    """A Triton started (not yet ready) and registered with ``stack`` to be stopped."""
    peer = triton_peer.launch(
        repository, models, python, workdir, cpus,
        access_token_file=workdir / "triton-token", cache_bytes=cache_bytes,
    )  # fmt: skip
    stack.callback(peer.process.stop)
    return peer


def triton_target(peer: TritonPeer) -> Target:
    return Target(peer.base_url, peer.process.pid, peer.metrics_url, peer.grpc_address)


def front_args(peer: TritonPeer, models: Sequence[str], workdir: Path) -> list[str]:
    """``cachefleet serve`` in front of ``peer`` (no cache options: the caller adds them)."""
    return [
        "--upstream", f"grpc://{peer.grpc_address}",
        "--upstream-auth-header", TOKEN_HEADER,
        "--upstream-auth-file", str(workdir / "triton-token"),
        "--upstream-models", ",".join(models),
        "--log-level", "warning",
    ]  # fmt: skip


def start_front(
    stack: contextlib.ExitStack,
    peer: TritonPeer,
    models: Sequence[str],
    workdir: Path,
    cpus: str | None,
    cache_args: Sequence[str],
    name: str = "cachefleet serve --upstream",
) -> ServerProcess:
    """A ready front registered with ``stack``; ``cache_args``: its ``--cache`` and the rest."""
    server = ServerProcess(
        [*front_args(peer, models, workdir), *cache_args], workdir, cpus=cpus, name=name
    )
    stack.callback(server.stop)
    server.start()
    return server


def front_target(front: ServerProcess, peer: TritonPeer) -> Target:
    """The front as a target, Triton's CPU charged beside its own."""
    return Target(
        front.base_url, front.pid, grpc_address=front.grpc_url, upstream_pid=peer.process.pid
    )
