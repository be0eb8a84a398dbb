"""Real object stores and a web server on loopback, for ``cachefleet fetch-model``'s tests.

- ``MotoS3``: moto's S3 API server (``moto_server``) in its own process, with authentication on:
  its first requests (unauthenticated) make an IAM user allowed ``s3:*`` and its access key,
  after which a request signed with any other key is refused as by AWS.
- ``GcsEmulator``: ``gcp-storage-emulator``, the GCS JSON API in memory (anonymous).
- ``TlsFileServer``: the standard library's HTTP server over TLS, serving a folder.
- ``RecordingServer``: answers every request with one fixed status (a redirect, or 200 and a
  body, with or without its length) and records what it was sent, over TLS or plain HTTP.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import socket
import ssl
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from cachefleet.bench.processes import ManagedProcess, free_port, http_ok

from .certificates import Issued

#: moto's unauthenticated requests before it checks signatures: create the user, allow it,
#: make its key.
_SETUP_REQUESTS = 3
REGION = "us-east-1"
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class AccessKey:
    id: str
    secret: str


class MotoS3:
    """moto's S3 server; ``key`` is the one access key it accepts."""

    def __init__(self, logdir: Path) -> None:
        self.port = free_port()
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_REQUESTS)}
        command = [str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(self.port)]
        self.process = ManagedProcess("moto_server", command, logdir / "moto.log", env)
        # A TCP probe: an HTTP request might count as one of the unauthenticated ones.
        self.process.wait_until(_listening(self.port), timeout_s=60)
        self.key = self._make_user()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _make_user(self) -> AccessKey:
        iam = boto3.client(
            "iam",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="setup",
            aws_secret_access_key="setup",
        )
        iam.create_user(UserName="model-reader")
        allow = {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}
        policy = {"Version": "2012-10-17", "Statement": [allow]}
        iam.put_user_policy(
            UserName="model-reader", PolicyName="s3", PolicyDocument=json.dumps(policy)
        )
        created = iam.create_access_key(UserName="model-reader")["AccessKey"]
        return AccessKey(created["AccessKeyId"], created["SecretAccessKey"])

    def client(self) -> Any:
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id=self.key.id,
            aws_secret_access_key=self.key.secret,
        )

    def upload_tree(self, bucket: str, prefix: str, folder: Path) -> None:
        client = self.client()
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(folder)}")

    def stop(self) -> None:
        self.process.stop()


class GcsEmulator:
    """gcp-storage-emulator in memory; clients find it through STORAGE_EMULATOR_HOST."""

    def __init__(self, logdir: Path) -> None:
        self.port = free_port()
        command = [str(BIN / "gcp-storage-emulator"), "start", "--host", "127.0.0.1",
                   "--port", str(self.port), "--in-memory"]  # fmt: skip
        self.process = ManagedProcess("gcp-storage-emulator", command, logdir / "gcs.log",
                                      dict(os.environ))  # fmt: skip
        self.process.wait_until(http_ok(f"{self.endpoint}/storage/v1/b"), timeout_s=60)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.stop()


class TlsFileServer:
    """Serves ``folder`` over HTTPS on loopback, with the certificate ``issued`` (signed by the
    CA whose certificate is ``ca``)."""

    def __init__(self, folder: Path, issued: Issued, *, ca: Path) -> None:
        self.ca = ca
        handler = functools.partial(_QuietHandler, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(issued.cert), str(issued.key))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, name: str) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/{name}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased


class RecordingServer:
    """Answers every request with ``status`` (and ``location`` as its Location, for a redirect)
    and ``body``, and records each request it gets; TLS with ``issued``, else plain HTTP.
    Without ``declare_length`` the body's end is the connection's (no Content-Length)."""

    def __init__(
        self,
        *,
        status: int = 200,
        location: str | None = None,
        body: bytes = b'{"status": "ok"}',
        declare_length: bool = True,
        issued: Issued | None = None,
    ) -> None:
        self.received: list[Received] = []
        self.status, self.location = status, location
        self.body, self.declare_length = body, declare_length
        handler = functools.partial(_RecordingHandler, self)
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.scheme = "http"
        if issued is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(issued.cert), str(issued.key))
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "") -> str:
        return f"{self.scheme}://127.0.0.1:{self.server.server_address[1]}/{path}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    def __init__(self, owner: RecordingServer, *args: Any) -> None:
        self.owner = owner
        super().__init__(*args)

    def _answer(self) -> None:
        owner = self.owner
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        owner.received.append(
            Received(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        )
        self.send_response(owner.status)
        if owner.location is not None:
            self.send_header("Location", owner.location)
        self.send_header("Content-Type", "application/octet-stream")
        if owner.declare_length:
            self.send_header("Content-Length", str(len(owner.body)))
        self.end_headers()
        self.wfile.write(owner.body)

    do_GET = do_POST = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _listening(port: int) -> Callable[[], bool]:
    def probe() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
        except OSError:
            return False
        return True

    return probe
