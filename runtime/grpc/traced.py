"""The gRPC side of tracing: one server span per inference request.

An interceptor added only when tracing is on (see ``server.start_grpc_server``). It wraps the
behaviour of ``ModelInfer`` (a span per call) and ``ModelStreamInfer`` (a span per request of
the stream, from its arrival to its response) so that the span is
:data:`cachefleet.runtime.tracing.current.CURRENT` while the request is answered; the status
code, the ``x-cache`` trailing metadata and an error's message end it. Other methods pass
through untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

import grpc
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.grpc.handlers import SERVICE, Malformed
from cachefleet.runtime.grpc.restricted import Continuation, Handler
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT, TracedRequest
from cachefleet.runtime.tracing.propagation import context_from_metadata
from cachefleet.runtime.tracing.request_spans import end_request, start_request

_INFER = f"/{SERVICE}/ModelInfer"
_STREAM = f"/{SERVICE}/ModelStreamInfer"


class TraceContextInterceptor(grpc.aio.ServerInterceptor):
    """Traces the inference calls with ``tracer``."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    async def intercept_service(
        self, continuation: Continuation, handler_call_details: grpc.HandlerCallDetails
    ) -> Handler | None:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method not in (_INFER, _STREAM):
            return handler
        codec = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if method == _INFER and handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(self._unary(handler.unary_unary), **codec)
        if method == _STREAM and handler.stream_stream is not None:
            behaviour = cast(Callable[..., AsyncIterator[Any]], handler.stream_stream)
            return grpc.stream_stream_rpc_method_handler(self._streaming(behaviour), **codec)
        return handler

    def _start(self, method: str, request: Any, context: Any) -> TracedRequest:
        attributes: dict[str, AttributeValue] = {
            names.TRANSPORT: "grpc",
            names.RPC_SYSTEM: "grpc",
            names.RPC_SERVICE: SERVICE,
            names.RPC_METHOD: method,
        }
        if not isinstance(request, Malformed):
            attributes[names.MODEL_NAME] = request.model_name
            if request.model_version:
                attributes[names.MODEL_VERSION] = request.model_version
        parent = context_from_metadata(context.invocation_metadata())
        return start_request(self._tracer, f"{SERVICE}/{method}", parent, attributes)

    def _unary(self, behaviour: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def traced(request: Any, context: Any) -> Any:
            span = self._start("ModelInfer", request, context)
            token = CURRENT.set(span)
            try:
                return await behaviour(request, context)
            finally:
                CURRENT.reset(token)
                code = context.code() or grpc.StatusCode.OK
                error = None
                if code is not grpc.StatusCode.OK:
                    error = (code.name, str(context.details() or code.name))
                end_request(
                    span,
                    {names.RPC_GRPC_STATUS: code.value[0]},
                    cache_result=_cache_result(context.trailing_metadata()),
                    error=error,
                )

        return traced

    def _streaming(
        self, behaviour: Callable[..., AsyncIterator[Any]]
    ) -> Callable[..., AsyncIterator[Any]]:
        async def traced(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            spans: list[TracedRequest] = []

            async def arriving() -> AsyncIterator[Any]:
                async for request in requests:
                    span = self._start("ModelStreamInfer", request, context)
                    spans.append(span)
                    CURRENT.set(span)  # the servicer answers it next, in this task
                    yield request

            # Set, never reset: the call's task ends with the stream, and a generator may be
            # closed from another context, where resetting would fail.
            async for response in behaviour(arriving(), context):
                if spans:
                    _end_streamed(spans.pop(0), response)
                yield response
            for span in spans:  # the client went before their answers
                end_request(span, {}, cache_result=None, error=("CANCELLED", "no answer"))

        return traced


def _end_streamed(span: TracedRequest, response: Any) -> None:
    """A stream's answer: an error goes in band (``error_message``), the stream goes on."""
    message = response.error_message
    error = ("error_message", message) if message else None
    end_request(
        span, {names.RPC_GRPC_STATUS: grpc.StatusCode.OK.value[0]}, cache_result=None, error=error
    )


def _cache_result(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "x-cache":
            return value if isinstance(value, str) else value.decode("latin-1")
    return None
