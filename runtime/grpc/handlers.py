"""The service's method handlers, built from its descriptor, with requests parsed leniently.

The generated ``add_..._to_server`` decodes with ``FromString``: bytes that are not a message make
grpc itself end the call with ``UNKNOWN`` and a Python exception's name, before any code of ours
runs. Here the one parser (:func:`parsed`) gives back :class:`Malformed` instead, and
:func:`checked` turns that into a bad request (``INVALID_ARGUMENT``, or an in-band error on a
stream), as for any other malformed input. ``ModelInfer`` takes and gives raw bytes (no codec):
its implementation digests the request bytes for the memo before it parses them, with the same
:func:`parsed`. The handlers are built from ``grpc_service.proto``'s descriptor, so they follow
whichever generated module is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.message import DecodeError

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.grpc.messages import service_pb2

SERVICE = "inference.GRPCInferenceService"
#: Methods whose behaviours take and return serialized bytes.
RAW_METHODS = frozenset({"ModelInfer"})

if TYPE_CHECKING:  # generic in the type stubs only
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler


@dataclass(frozen=True)
class Malformed:
    """A request whose bytes are not the method's message."""

    reason: str


def parsed(message_type: Any, data: bytes) -> Any:
    """``data`` as a ``message_type`` message, or :class:`Malformed`."""
    try:
        return message_type.FromString(data)
    except (DecodeError, ValueError, RuntimeError) as error:
        return Malformed(str(error) or type(error).__name__)


def checked(request: Any) -> Any:
    """``request``, or BadRequestError when it is :class:`Malformed`: the one malformed check."""
    if isinstance(request, Malformed):
        raise BadRequestError(f"malformed request message: {request.reason}")
    return request


def method_handlers(behaviours: Callable[[str], Any]) -> dict[str, Handler]:
    """Each method's handler, by method name, with the behaviour ``behaviours(name)``."""
    service = service_pb2.DESCRIPTOR.services_by_name[SERVICE.rpartition(".")[2]]
    handlers: dict[str, Handler] = {}
    for method in service.methods:
        codec: dict[str, Any] = {}
        if method.name not in RAW_METHODS:
            request = getattr(service_pb2, method.input_type.name)
            response = getattr(service_pb2, method.output_type.name)
            codec = {
                "request_deserializer": lambda data, request=request: parsed(request, data),
                "response_serializer": response.SerializeToString,
            }
        behaviour = behaviours(method.name)
        if method.client_streaming and method.server_streaming:
            handlers[method.name] = grpc.stream_stream_rpc_method_handler(behaviour, **codec)
        elif method.client_streaming:
            handlers[method.name] = grpc.stream_unary_rpc_method_handler(behaviour, **codec)
        elif method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(behaviour, **codec)
        else:
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(behaviour, **codec)
    return handlers


def add_handlers(handlers: dict[str, Handler], server: grpc.Server) -> None:
    """Serve the method ``handlers`` (by method name) on ``server``."""
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    server.add_registered_method_handlers(SERVICE, handlers)  # the faster lookup for known ones


def with_behaviour(handler: Handler, behaviour: Callable[..., Any]) -> Handler:
    """A handler of ``handler``'s kind and codec whose behaviour is ``behaviour``."""
    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(behaviour, **codec)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(behaviour, **codec)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(behaviour, **codec)
    return grpc.unary_unary_rpc_method_handler(behaviour, **codec)
