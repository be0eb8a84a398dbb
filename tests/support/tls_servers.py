"""``cachefleet serve`` over HTTPS (uvicorn's ``--ssl-certfile``/``--ssl-keyfile``) on a free
loopback port, started once it answers ``/v2/health/ready`` over TLS."""

from __future__ import annotations

import os
import ssl
from collections.abc import Sequence
from pathlib import Path

import httpx

from support.certificates import Issued
from support.processes import CACHEFLEET, ManagedProcess, ServerProcess


def start_https_server(
    model_repository: Path, logdir: Path, server_cert: Issued, ca_cert: Path,
    extra_args: Sequence[str] = (),
) -> ServerProcess:  # fmt: skip
    """A started server whose HTTP port serves ``server_cert`` (signed by ``ca_cert``); the
    caller stops it."""
    server = ServerProcess(
        ["--model-repository", str(model_repository), "--ssl-certfile", str(server_cert.cert),
         "--ssl-keyfile", str(server_cert.key), *extra_args],
        logdir,
    )  # fmt: skip
    command = [*CACHEFLEET, "serve", "--host", "127.0.0.1", "--port", str(server.port),
               "--grpc-port", str(server.grpc_port), *server.args]  # fmt: skip
    server.managed = ManagedProcess("https", command, server.log_path, dict(os.environ))
    context = ssl.create_default_context(cafile=str(ca_cert))

    def ready() -> bool:
        try:
            answer = httpx.get(https_url(server, "/v2/health/ready"), verify=context)  # noqa: TID251
            return answer.status_code == 200
        except httpx.HTTPError:
            return False

    server.managed.wait_until(ready, 180)
    return server


def https_url(server: ServerProcess, path: str) -> str:
    return f"https://127.0.0.1:{server.port}{path}"
