"""The gRPC side of tracing: each inference call's W3C trace context, from its metadata.

An interceptor added only when tracing is on (see ``server.start_grpc_server``). For
``ModelInfer`` and ``ModelStreamInfer`` it wraps the method's behaviour so that
:data:`cachefleet.runtime.tracing.origin.CURRENT` holds the call's origin while it is answered;
the service's ledger makes one span per inference request under it (one per message of a
stream). Other methods pass through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, cast

import grpc
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.grpc.errors import code_of_status
from cachefleet.runtime.grpc.handlers import SERVICE
from cachefleet.runtime.grpc.restricted import Continuation, Handler
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.origin import CURRENT, Origin
from cachefleet.runtime.tracing.propagation import context_from_metadata

_TRACED = {
    f"/{SERVICE}/ModelInfer": "ModelInfer",
    f"/{SERVICE}/ModelStreamInfer": "ModelStreamInfer",
}


def _status(http_status: int) -> Mapping[str, AttributeValue]:
    return {names.RPC_GRPC_STATUS: code_of_status(http_status).value[0]}


class TraceContextInterceptor(grpc.aio.ServerInterceptor):
    """Sets the trace origin of inference calls around their behaviour."""

    async def intercept_service(
        self,
        continuation: Continuation,
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        details = handler_call_details
        handler = await continuation(details)
        method = _TRACED.get(details.method)
        if handler is None or method is None:
            return handler
        origin = Origin(
            parent=context_from_metadata(details.invocation_metadata),
            name=f"{SERVICE}/{method}",
            attributes={
                names.TRANSPORT: "grpc",
                names.RPC_SYSTEM: "grpc",
                names.RPC_SERVICE: SERVICE,
                names.RPC_METHOD: method,
            },
            status=_status,
        )
        codec = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(_unary(handler.unary_unary, origin), **codec)
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _streaming(cast(Callable[..., AsyncIterator[Any]], handler.stream_stream), origin),
                **codec,
            )
        return handler


def _unary(behaviour: Callable[..., Awaitable[Any]], origin: Origin) -> Callable[..., Any]:
    async def traced(request: Any, context: Any) -> Any:
        token = CURRENT.set(origin)
        try:
            return await behaviour(request, context)
        finally:
            CURRENT.reset(token)

    return traced


def _streaming(
    behaviour: Callable[..., AsyncIterator[Any]], origin: Origin
) -> Callable[..., AsyncIterator[Any]]:
    async def traced(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        # Set, never reset: the call's task ends with the stream, and a generator may be closed
        # from another context, where resetting would fail.
        CURRENT.set(origin)
        async for response in behaviour(requests, context):
            yield response

    return traced
