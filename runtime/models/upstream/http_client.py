"""The upstream over KServe v2 HTTP: a miss is one POST with Triton's binary tensor extension.

The inputs' canonical bytes go after the JSON header as they are (``binary_data_size``), and
every output is asked for in binary (``binary_data_output``), so binary tensors are never
re-encoded either way; a server that answers in JSON anyway is converted once
(``contents``). Connections are kept alive, one per calling thread (``http.client`` is not
thread-safe), and every socket operation is bounded by the call's deadline. Errors keep the
upstream's status and its ``{"error": ...}`` text; only a connection that fails or a deadline
that passes counts for the breaker (an answer, whatever its status, is the upstream working).
A forwarded miss of a traced request is a span of its own (``tracing.upstream_spans``), its
``traceparent`` sent as a header.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any
from urllib.parse import quote

from google.protobuf import json_format

from cachefleet.runtime.config import UpstreamSettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.config_message import new_model_config
from cachefleet.runtime.models.upstream.client import (
    CIRCUIT_OPEN,
    IndexRow,
    UpstreamError,
    UpstreamUnavailableError,
    auth_metadata,
    new_breaker,
    split_url,
    unavailable,
)
from cachefleet.runtime.models.upstream.contents import json_output_tensor, output_bytes_tensor
from cachefleet.runtime.tensor import Tensor
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.upstream_spans import UpstreamCall, upstream_call

_HEADER_LENGTH = "Inference-Header-Content-Length"


class HttpUpstreamClient:
    """The :class:`UpstreamClient` over KServe v2 HTTP."""

    def __init__(self, settings: UpstreamSettings) -> None:
        if settings.url is None:
            raise ValueError("no upstream url")
        self.target, secure = split_url(settings.url)
        host, _, port = self.target.rpartition(":")
        self._host, self._port = host.strip("[]") or self.target, int(port) if port else None
        self._scheme = "https" if secure else "http"
        self._infer_timeout_s = settings.timeout_s
        self._control_timeout_s = settings.control_timeout_s
        self._headers = dict(auth_metadata(settings))
        self._tls: ssl.SSLContext | None = None
        if secure:
            self._tls = ssl.create_default_context(
                cafile=None if settings.tls_ca_file is None else str(settings.tls_ca_file)
            )
            if settings.tls_cert_file is not None and settings.tls_key_file is not None:
                self._tls.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
        self.breaker = new_breaker(self.target, settings)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: set[http.client.HTTPConnection] = set()

    def close(self) -> None:
        with self._lock:
            connections, self._open = self._open, set()
        for connection in connections:
            connection.close()

    def server_ready(self) -> bool:
        status, _, _ = self._call("GET", "/v2/health/ready", accept_errors=True)
        return status == 200

    def server_identity(self) -> str:
        document = self._json("GET", "/v2")
        return f"{document.get('name', '')} {document.get('version', '')}"

    def index(self) -> list[IndexRow]:
        try:
            rows = self._json("POST", "/v2/repository/index", b"{}")
        except UpstreamError as error:
            if error.status_code in (404, 405, 501):  # no repository extension
                return []
            raise
        return [
            IndexRow(row["name"], str(row.get("version", "")), row.get("state", ""),
                     row.get("reason", ""))
            for row in rows
        ]  # fmt: skip

    def model_versions(self, name: str) -> list[str]:
        return [str(each) for each in self._json("GET", _model_path(name, "")).get("versions", [])]

    def model_ready(self, name: str, version: str) -> bool:
        path = f"{_model_path(name, version)}/ready"
        return self._call("GET", path, accept_errors=True)[0] == 200

    def model_config(self, name: str, version: str) -> Any:
        document = self._json("GET", f"{_model_path(name, version)}/config")
        message = new_model_config()
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
        return message

    def load(self, name: str, config_json: str | None) -> None:
        body: dict[str, Any] = {}
        if config_json is not None:
            body["parameters"] = {"config": config_json}
        path = f"/v2/repository/models/{quote(name, safe='')}/load"
        self._call("POST", path, json.dumps(body).encode(), timeout_s=self._infer_timeout_s)

    def unload(self, name: str) -> None:
        self._call("POST", f"/v2/repository/models/{quote(name, safe='')}/unload", b"{}")

    def infer(self, name: str, version: str, inputs: Sequence[Tensor]) -> list[Tensor]:
        header = json.dumps(
            {
                "inputs": [
                    {"name": t.name, "datatype": t.datatype, "shape": list(t.shape),
                     "parameters": {"binary_data_size": len(t.data)}}
                    for t in inputs
                ],
                "parameters": {"binary_data_output": True},
            }
        ).encode()  # fmt: skip
        body = b"".join([header, *(tensor.data for tensor in inputs)])
        extra = {"Content-Type": "application/octet-stream", _HEADER_LENGTH: str(len(header))}
        path = f"{_model_path(name, version)}/infer"
        attributes = partial(self._span_attributes, path, name, version)
        with upstream_call("POST", attributes) as traced:
            _, headers, answer = self._call(
                "POST", path, body, extra, timeout_s=self._infer_timeout_s, traced=traced
            )
        length = headers.get(_HEADER_LENGTH)
        split = len(answer) if length is None else int(length)
        document = _parsed(answer[:split])
        binary, offset, outputs = memoryview(answer)[split:], 0, []
        for output in document.get("outputs", []):
            size = (output.get("parameters") or {}).get("binary_data_size")
            if size is None:
                outputs.append(json_output_tensor(output))
                continue
            outputs.append(output_bytes_tensor(output, bytes(binary[offset : offset + size])))
            offset += size
        return outputs

    def _span_attributes(self, path: str, name: str, version: str) -> dict[str, str | int]:
        attributes: dict[str, str | int] = {
            names.HTTP_METHOD: "POST",
            names.URL_FULL: f"{self._scheme}://{self.target}{path}",
            names.SERVER_ADDRESS: self._host,
            names.MODEL_NAME: name,
            names.MODEL_VERSION: version,
        }
        if self._port is not None:
            attributes[names.SERVER_PORT] = self._port
        return attributes

    def _json(self, method: str, path: str, body: bytes | None = None) -> Any:
        return _parsed(self._call(method, path, body)[2])

    def _call(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        extra: dict[str, str] | None = None,
        *,
        timeout_s: float | None = None,
        accept_errors: bool = False,
        traced: UpstreamCall | None = None,
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """One request under the breaker and a deadline; errors translated once, here.
        ``traced``: the call's span, whose ``traceparent`` goes with it and which gets the
        answer's status."""
        if not self.breaker.allow():
            raise unavailable(self.target, CIRCUIT_OPEN)
        timeout = self._control_timeout_s if timeout_s is None else timeout_s
        headers = {**self._headers, **(extra or {})}
        if traced is not None:
            headers.update(traced.headers)
        try:
            status, answer_headers, answer = self._exchange(method, path, body, headers, timeout)
        except TimeoutError:
            self.breaker.record_failure("timeout")
            raise unavailable(self.target, f"did not answer within {timeout:g} s") from None
        except (OSError, http.client.HTTPException) as error:
            self.breaker.record_failure(str(error))
            raise UpstreamUnavailableError(
                f"upstream {self.target} cannot be reached: {error}"
            ) from None
        self.breaker.record_success()
        if traced is not None:
            traced.answered({names.HTTP_STATUS: status})
        if status >= 400 and not accept_errors:
            raise _answered_error(status, answer)
        return status, answer_headers, answer

    def _exchange(
        self, method: str, path: str, body: bytes | None, headers: dict[str, str], timeout: float
    ) -> tuple[int, http.client.HTTPMessage, bytes]:
        """Send on this thread's connection; once more on a new one if a kept-alive connection
        turns out closed before any answer (the upstream dropped it while idle)."""
        for attempt in (1, 2):
            connection, reused = self._connection(timeout)
            try:
                connection.request(method, path, body=body, headers=headers)
                response = connection.getresponse()
                return response.status, response.headers, response.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self._drop(connection)
                if not reused or attempt == 2:
                    raise
            except BaseException:
                self._drop(connection)
                raise
        raise AssertionError("unreachable")

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        connection: http.client.HTTPConnection | None = getattr(self._local, "connection", None)
        reused = connection is not None
        if connection is None:
            if self._tls is not None:
                connection = http.client.HTTPSConnection(
                    self._host, self._port, timeout=timeout, context=self._tls
                )
            else:
                connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
            self._local.connection = connection
            with self._lock:
                self._open.add(connection)
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection, reused

    def _drop(self, connection: http.client.HTTPConnection) -> None:
        connection.close()
        self._local.connection = None
        with self._lock:
            self._open.discard(connection)


def _model_path(name: str, version: str) -> str:
    path = f"/v2/models/{quote(name, safe='')}"
    return f"{path}/versions/{quote(version, safe='')}" if version else path


def _parsed(text: bytes) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise UpstreamError("the upstream's answer is not JSON", 502) from None


def _answered_error(status: int, answer: bytes) -> ServingError:
    """The upstream's error answer, with its status and its ``error`` text."""
    try:
        message = str(json.loads(answer).get("error", ""))
    except (ValueError, AttributeError):
        message = ""
    message = message or f"the upstream answered {status}"
    if status == 503:
        return UpstreamUnavailableError(message)
    return UpstreamError(message, status)
