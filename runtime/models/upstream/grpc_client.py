"""The upstream over gRPC, and the one place its status codes become our errors.

One channel for the server's life (HTTP/2 multiplexes the forwarded misses and the refresh
calls). Every call has a deadline: a forwarded inference ``timeout_s``, anything else
``control_timeout_s``, so an upstream that stopped answering (paused, partitioned) costs a
client at most that long, never a hang; an upstream that cannot be reached at all fails at once,
and after a few such failures the breaker refuses calls without trying until a probe gets
through. The auth header travels as call metadata and is never part of a message or a log line.

Errors keep the upstream's status and message (``tritonclient`` users check both): gRPC's code
becomes the HTTP status that maps back to the same code (``grpc.errors``), the upstream's text
is the message. Only a deadline and an open breaker are worded here, naming the upstream.

A forwarded miss of a traced request is a span of its own (``tracing.upstream_spans``), and its
``traceparent`` goes with the call as metadata, where Triton's OpenTelemetry tracing (and
another cachefleet) read it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, cast

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from cachefleet.runtime.config import UpstreamSettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.upstream.client import (
    CIRCUIT_OPEN,
    IndexRow,
    UpstreamError,
    UpstreamUnavailableError,
    auth_metadata,
    new_breaker,
    read_file,
    split_url,
    unavailable,
)
from cachefleet.runtime.models.upstream.contents import output_tensor
from cachefleet.runtime.tensor import Tensor
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.upstream_spans import UpstreamCall, upstream_call

logger = logging.getLogger(__name__)

#: gRPC status -> the HTTP status whose gRPC mapping (``grpc.errors``) is that status again.
_HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 503,
}
#: Codes that say the upstream was not reached (or did not answer): they count for the breaker.
_UNREACHED = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: ``inference.GRPCInferenceService``, as the client span names the call.
_SERVICE = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
_INFER_SPAN = f"{_SERVICE}/ModelInfer"
#: Messages are bounded by the server's own body limits; 2 GiB is gRPC's own ceiling.
_MAX_MESSAGE_BYTES = 2**31 - 1


class GrpcUpstreamClient:
    """The :class:`UpstreamClient` over KServe v2 gRPC."""

    def __init__(self, settings: UpstreamSettings) -> None:
        if settings.url is None:
            raise ValueError("no upstream url")
        self.target, secure = split_url(settings.url)
        host, _, port = self.target.rpartition(":")
        self._span_attributes = {
            names.RPC_SYSTEM: "grpc",
            names.RPC_SERVICE: _SERVICE,
            names.RPC_METHOD: "ModelInfer",
            names.SERVER_ADDRESS: host.strip("[]"),
            names.SERVER_PORT: int(port),
        }
        self._infer_timeout_s = settings.timeout_s
        self._control_timeout_s = settings.control_timeout_s
        self._metadata = auth_metadata(settings)
        options = [
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ]
        if secure:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=read_file(settings.tls_ca_file),
                private_key=read_file(settings.tls_key_file),
                certificate_chain=read_file(settings.tls_cert_file),
            )
            self._channel = grpc.secure_channel(self.target, credentials, options)
        else:
            self._channel = grpc.insecure_channel(self.target, options)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self.breaker = new_breaker(self.target, settings)

    def close(self) -> None:
        self._channel.close()

    def server_ready(self) -> bool:
        return bool(self._call("ServerReady", service_pb2.ServerReadyRequest()).ready)

    def server_identity(self) -> str:
        """The upstream's name and version (``triton 2.51.0``): a new server release may
        answer differently, so it is part of every model's identity."""
        answer = self._call("ServerMetadata", service_pb2.ServerMetadataRequest())
        return f"{answer.name} {answer.version}"

    def index(self) -> list[IndexRow]:
        try:
            answer = self._call("RepositoryIndex", service_pb2.RepositoryIndexRequest())
        except UpstreamError as error:
            if error.status_code == 501:  # no repository extension: --upstream-models
                return []
            raise
        return [IndexRow(row.name, row.version, row.state, row.reason) for row in answer.models]

    def model_versions(self, name: str) -> list[str]:
        answer = self._call("ModelMetadata", service_pb2.ModelMetadataRequest(name=name))
        return list(answer.versions)

    def model_ready(self, name: str, version: str) -> bool:
        request = service_pb2.ModelReadyRequest(name=name, version=version)
        return bool(self._call("ModelReady", request).ready)

    def model_config(self, name: str, version: str) -> Any:
        """The upstream's ``ModelConfig`` message of ``name`` at ``version``."""
        request = service_pb2.ModelConfigRequest(name=name, version=version)
        return self._call("ModelConfig", request).config

    def load(self, name: str, config_json: str | None) -> None:
        request = service_pb2.RepositoryModelLoadRequest(model_name=name)
        if config_json is not None:
            request.parameters["config"].string_param = config_json
        self._call("RepositoryModelLoad", request, timeout_s=self._infer_timeout_s)

    def unload(self, name: str) -> None:
        request = service_pb2.RepositoryModelUnloadRequest(model_name=name)
        self._call("RepositoryModelUnload", request)

    def infer(self, name: str, version: str, inputs: Sequence[Tensor]) -> list[Tensor]:
        """Forward one execution: the inputs' canonical bytes are the raw contents as they are,
        every output comes back (none is named, so the upstream returns them all)."""
        request = service_pb2.ModelInferRequest(model_name=name, model_version=version)
        for tensor in inputs:
            request.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
            request.raw_input_contents.append(tensor.data)

        def attributes() -> dict[str, str | int]:
            return {**self._span_attributes, names.MODEL_NAME: name, names.MODEL_VERSION: version}

        with upstream_call(_INFER_SPAN, attributes) as traced:
            answer = self._call(
                "ModelInfer", request, timeout_s=self._infer_timeout_s, traced=traced
            )
        raw = answer.raw_output_contents
        return [
            output_tensor(output, raw[index] if index < len(raw) else None)
            for index, output in enumerate(answer.outputs)
        ]

    def _call(
        self,
        method: str,
        request: Any,
        *,
        timeout_s: float | None = None,
        traced: UpstreamCall | None = None,
    ) -> Any:
        """One unary call under the breaker and a deadline; errors translated once, here.
        ``traced``: the call's span, whose ``traceparent`` goes with it and which gets its
        status code."""
        if not self.breaker.allow():
            raise unavailable(self.target, CIRCUIT_OPEN)
        timeout = self._control_timeout_s if timeout_s is None else timeout_s
        metadata = self._metadata if traced is None else self._metadata + traced.headers
        try:
            answer = getattr(self._stub, method)(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as error:
            raise self._translated(error, timeout, traced) from None
        self.breaker.record_success()
        if traced is not None:
            traced.answered({names.RPC_GRPC_STATUS: grpc.StatusCode.OK.value[0]})
        return answer

    def _translated(
        self, error: grpc.RpcError, timeout_s: float, traced: UpstreamCall | None
    ) -> ServingError:
        # What a failed unary call raises is a grpc.Call too (grpcio's _InactiveRpcError).
        call = cast(grpc.Call, error)
        code = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
        details = (call.details() if hasattr(call, "details") else None) or code.name
        if traced is not None:
            traced.answered({names.RPC_GRPC_STATUS: code.value[0]})
        if code in _UNREACHED:
            self.breaker.record_failure(details)
        else:
            self.breaker.record_success()  # it answered: reachable, whatever it said
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return unavailable(self.target, f"did not answer within {timeout_s:g} s")
        if code is grpc.StatusCode.UNAVAILABLE:
            return UpstreamUnavailableError(details)
        return UpstreamError(details, _HTTP_STATUS.get(code, 500))
