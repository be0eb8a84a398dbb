"""TLS with Triton's gRPC flags and uvicorn's HTTP ones, checked with the real clients.

Certificates are made in the test (``support.certificates``, with ``cryptography``): a CA that
signs the server and a client, and a second CA that the server does not trust.
"""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import loopback
from support.certificates import Authority, Issued, make_authority
from support.processes import CACHEFLEET, ServerProcess
from support.tls_servers import https_url, start_https_server
from tritonclient.utils import InferenceServerException

from cachefleet.cli.main import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pki")
    ca, rogue = make_authority(folder, "test-ca"), make_authority(folder, "rogue-ca")
    return {
        "ca": ca,
        "rogue": rogue,
        "server": ca.issue(folder, "server"),
        "client": ca.issue(folder, "client", client=True),
        "rogue_client": rogue.issue(folder, "rogue-client", client=True),
    }


def _tls_args(pki: dict[str, Any], *, mutual: bool) -> list[str]:
    server: Issued = pki["server"]
    ca: Authority = pki["ca"]
    args = ["--grpc-use-ssl", "--grpc-server-cert", str(server.cert),
            "--grpc-server-key", str(server.key)]  # fmt: skip
    if mutual:
        args += ["--grpc-use-ssl-mutual", "--grpc-root-cert", str(ca.cert)]
    return args


def _infer(client: grpcclient.InferenceServerClient) -> Any:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = grpcclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    return client.infer("simple", inputs, client_timeout=10).as_numpy("OUTPUT0")


def _client(server: ServerProcess, **options: Any) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url, **options)


def _refused(server: ServerProcess, **options: Any) -> None:
    with _client(server, **options) as client, pytest.raises(InferenceServerException):
        _infer(client)


def test_grpc_over_tls(make_server: Callable[..., ServerProcess], pki: dict[str, Any]) -> None:
    server = make_server(*_tls_args(pki, mutual=False))
    ca: Authority = pki["ca"]
    with _client(server, ssl=True, root_certificates=str(ca.cert)) as client:
        assert client.is_server_ready()
        assert _infer(client) is not None
    _refused(server)  # plain text to a TLS port
    _refused(server, ssl=True, root_certificates=str(pki["rogue"].cert))  # not our CA
    assert "over TLS" in server.log()


def test_grpc_over_mutual_tls(
    make_server: Callable[..., ServerProcess], pki: dict[str, Any]
) -> None:
    server = make_server(*_tls_args(pki, mutual=True))
    ca: Authority = pki["ca"]
    client_cert: Issued = pki["client"]
    trusted = {"ssl": True, "root_certificates": str(ca.cert)}
    with _client(
        server,
        **trusted,
        private_key=str(client_cert.key),
        certificate_chain=str(client_cert.cert),
    ) as client:
        assert _infer(client) is not None
    _refused(server, **trusted)  # no client certificate
    rogue: Issued = pki["rogue_client"]
    _refused(server, **trusted, private_key=str(rogue.key), certificate_chain=str(rogue.cert))


def test_tls_settings_that_cannot_work_are_refused_at_start(
    tmp_path: Path, pki: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """``cachefleet serve``'s own entry point, in this process (a process per case only paid for
    its imports): exit status 2 and the message. The repository does not exist, so settings
    that were wrongly accepted end at its check, with another message, instead of serving."""
    cases = [
        (["--grpc-use-ssl"], "--grpc-use-ssl needs --grpc-server-cert"),
        (["--grpc-use-ssl-mutual"], "--grpc-use-ssl-mutual needs --grpc-use-ssl"),
        ([*_tls_args(pki, mutual=False), "--grpc-use-ssl-mutual"], "needs --grpc-root-cert"),
        (["--ssl-certfile", str(pki["server"].cert)], "--ssl-certfile and --ssl-keyfile"),
    ]
    for args, message in cases:
        status = main(["serve", "--model-repository", str(tmp_path / "absent"), *args])
        stderr = capsys.readouterr().err
        assert status == 2, stderr
        assert message in stderr


@pytest.fixture
def https_server(
    model_repository: Path, tmp_path: Path, pki: dict[str, Any]
) -> Iterator[ServerProcess]:
    server = start_https_server(model_repository, tmp_path, pki["server"], pki["ca"].cert)
    yield server
    server.stop()


def test_http_over_tls(https_server: ServerProcess, pki: dict[str, Any]) -> None:
    context = ssl.create_default_context(cafile=str(pki["ca"].cert))
    body = {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    answer = httpx.post(  # noqa: TID251 (its own CA)
        https_url(https_server, "/v2/models/simple/infer"), json=body, verify=context
    )
    assert answer.status_code == 200
    assert answer.json()["outputs"][0]["data"] == [2 * i for i in range(16)]
    rogue = ssl.create_default_context(cafile=str(pki["rogue"].cert))
    with pytest.raises(httpx.ConnectError):
        httpx.get(https_url(https_server, "/v2/health/ready"), verify=rogue)  # noqa: TID251 (its own CA)
    with pytest.raises(httpx.HTTPError):  # plain text to the TLS port is not served
        loopback.get(f"http://127.0.0.1:{https_server.port}/v2/health/ready", timeout=5)
    flush = [*CACHEFLEET, "flush", "--model", "simple", "--server", https_url(https_server, "")]
    untrusted = subprocess.run(flush, capture_output=True, text=True, timeout=60)
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    trusted = subprocess.run(
        [*flush, "--cacert", str(pki["ca"].cert)], capture_output=True, text=True, timeout=60
    )
    assert trusted.returncode == 0, trusted.stderr
