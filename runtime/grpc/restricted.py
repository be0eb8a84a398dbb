"""``--grpc-restricted-protocol``: one interceptor checks each call's protocol group.

Triton's groups per method (``grpc_server.cc``): the metadata key is
``triton-grpc-protocol-<key>``, and a call without it (or with another value) ends with
``UNAVAILABLE`` and ``This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'``, before the request is read. The interceptor is installed only
when something is restricted, so an open server pays nothing per call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import grpc

from cachefleet.runtime.config import ApiGroup, Restriction, by_group

_SERVICE = "/inference.GRPCInferenceService/"
#: Each method's group, as Triton files them.
GROUPS: dict[str, ApiGroup] = {
    **dict.fromkeys(("ServerLive", "ServerReady", "ModelReady"), "health"),
    **dict.fromkeys(("ServerMetadata", "ModelMetadata"), "metadata"),
    **dict.fromkeys(("ModelInfer", "ModelStreamInfer"), "inference"),
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    **dict.fromkeys(
        ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"), "model-repository"
    ),
    **dict.fromkeys(
        (
            f"{kind}SharedMemory{action}"
            for kind in ("System", "Cuda")
            for action in ("Status", "Register", "Unregister")
        ),
        "shared-memory",
    ),
    "TraceSetting": "trace",
    "LogSettings": "logging",
}

if TYPE_CHECKING:  # generic in the type stubs only
    Handler = grpc.RpcMethodHandler[Any, Any]
else:
    Handler = grpc.RpcMethodHandler
Continuation = Callable[[grpc.HandlerCallDetails], Awaitable["Handler | None"]]


def refusal_message(restriction: Restriction) -> str:
    return f"This protocol is restricted, expecting header '{restriction.grpc_key}'"


class RestrictedProtocols(grpc.aio.ServerInterceptor):
    """Refuses calls to a restricted group that lack its metadata."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        groups = by_group(restrictions)
        self._by_method = {
            _SERVICE + method: groups[group] for method, group in GROUPS.items() if group in groups
        }

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        restriction = self._by_method.get(handler_call_details.method)
        if restriction is None or handler is None:
            return handler
        key = restriction.grpc_key
        presented = next(
            (
                value
                for name, value in handler_call_details.invocation_metadata or ()
                if name == key
            ),
            None,
        )
        if restriction.admits(presented):
            return handler
        return _refusing(handler, refusal_message(restriction))


def _refusing(handler: Handler, message: str) -> Handler:
    """A handler of ``handler``'s kind that ends the call with UNAVAILABLE and ``message``."""

    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(grpc.StatusCode.UNAVAILABLE, message)

    codec = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, **codec)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse, **codec)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse, **codec)
    return grpc.unary_unary_rpc_method_handler(refuse, **codec)
