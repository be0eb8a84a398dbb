"""The service's method handlers, built from its descriptor, with requests decoded leniently.

The generated ``add_..._to_server`` decodes with ``FromString``: bytes that are not a message make
grpc itself end the call with ``UNKNOWN`` and a Python exception's name, before any code of ours
runs. Here the decoder gives back :class:`Malformed` instead, and the servicer answers
``INVALID_ARGUMENT`` (a bad request, as for any other malformed input). The handlers are built
from ``grpc_service.proto``'s descriptor, so they follow whichever generated module is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from cachefleet.runtime.grpc.messages import service_pb2

SERVICE = "inference.GRPCInferenceService"


@dataclass(frozen=True)
class Malformed:
    """A request whose bytes are not the method's message."""

    reason: str


def _lenient(decode: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def lenient(data: bytes) -> Any:
        try:
            return decode(data)
        except (DecodeError, ValueError, RuntimeError) as error:
            return Malformed(str(error) or type(error).__name__)

    return lenient


def method_handlers(servicer: Any) -> dict[str, Any]:
    """Each method's handler, by method name, bound to ``servicer``'s method of that name."""
    service = service_pb2.DESCRIPTOR.services_by_name[SERVICE.rpartition(".")[2]]
    handlers: dict[str, Any] = {}
    for method in service.methods:
        request = getattr(service_pb2, method.input_type.name)
        response = getattr(service_pb2, method.output_type.name)
        codec = {
            "request_deserializer": _lenient(request.FromString),
            "response_serializer": response.SerializeToString,
        }
        behaviour = getattr(servicer, method.name)
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **codec)
        elif method.client_streaming:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(behaviour, **codec)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(behaviour, **codec)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **codec)
    return handlers


def add_handlers(handlers: dict[str, Any], server: grpc.Server | grpc.aio.Server) -> None:
    """Serve the method ``handlers`` (by method name) on ``server``, of either kind."""
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    register = getattr(server, "add_registered_method_handlers", None)
    if register is not None:  # grpcio >= 1.63: a faster lookup for known methods
        register(SERVICE, handlers)
