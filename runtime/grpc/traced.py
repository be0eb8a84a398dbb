"""The gRPC side of tracing: one server span per inference request, on the same server.

When the runtime traces, the server is built with the inference behaviours wrapped here (once,
at start: a server that does not trace has no wrapper and pays nothing per call).
``ModelInfer`` gets a span per call and ``ModelStreamInfer`` a span per request of the stream,
from its arrival to its response. The span is :data:`cachefleet.runtime.tracing.current.CURRENT`
on the call's thread while the request is answered, and so on the event loop too, where the
call's work runs in a copy of the thread's context (``loop_bridge``): the ledger adds the model
and how the cache answered, the scheduler each execution; the status code, the ``x-cache``
trailing metadata and an error's message end it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

from cachefleet.runtime.grpc.handlers import SERVICE, Handler, Malformed, with_behaviour
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT, TracedRequest
from cachefleet.runtime.tracing.propagation import context_from_metadata
from cachefleet.runtime.tracing.request_spans import end_request, start_request


def traced_handlers(handlers: dict[str, Handler], tracer: trace.Tracer) -> dict[str, Handler]:
    """``handlers`` with the inference methods traced by ``tracer``; the others as they are."""
    spans = _Spans(tracer)
    traced = dict(handlers)
    infer, stream = handlers["ModelInfer"], handlers["ModelStreamInfer"]
    assert infer.unary_unary is not None
    assert stream.stream_stream is not None
    traced["ModelInfer"] = with_behaviour(infer, spans.unary(infer.unary_unary))
    traced["ModelStreamInfer"] = with_behaviour(stream, spans.streaming(stream.stream_stream))
    return traced


class _Spans:
    def __init__(self, tracer: trace.Tracer) -> None:
        self._tracer = tracer

    def _start(self, method: str, request: Any, context: grpc.ServicerContext) -> TracedRequest:
        attributes: dict[str, AttributeValue] = {
            names.TRANSPORT: "grpc",
            names.RPC_SYSTEM: "grpc",
            names.RPC_SERVICE: SERVICE,
            names.RPC_METHOD: method,
        }
        if request is not None and not isinstance(request, Malformed):
            attributes[names.MODEL_NAME] = request.model_name
            if request.model_version:
                attributes[names.MODEL_VERSION] = request.model_version
        parent = context_from_metadata(context.invocation_metadata())
        return start_request(self._tracer, f"{SERVICE}/{method}", parent, attributes)

    def unary(self, behaviour: Callable[..., Any]) -> Callable[..., Any]:
        """``ModelInfer``: its request is still bytes here, so the model is the ledger's to add."""

        @functools.wraps(behaviour)
        def traced(request: bytes, context: Any) -> Any:  # code(), details(): not in the stubs
            span = self._start("ModelInfer", None, context)
            CURRENT.set(span)  # the call's own context (grpcio runs each call in a fresh one)
            try:
                return behaviour(request, context)
            finally:
                code = context.code() or grpc.StatusCode.OK
                error = None
                if code is not grpc.StatusCode.OK:
                    error = (code.name, str(_text(context.details()) or code.name))
                end_request(
                    span,
                    {names.RPC_GRPC_STATUS: code.value[0]},
                    cache_result=_cache_result(context.trailing_metadata()),
                    error=error,
                )

        return traced

    def streaming(self, behaviour: Callable[..., Iterator[Any]]) -> Callable[..., Iterator[Any]]:
        @functools.wraps(behaviour)
        def traced(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            spans: list[TracedRequest] = []

            def arriving() -> Iterator[Any]:
                for request in requests:
                    span = self._start("ModelStreamInfer", request, context)
                    spans.append(span)
                    CURRENT.set(span)  # the behaviour answers it next, on this thread
                    yield request

            for response in behaviour(arriving(), context):
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


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value or "")


def _cache_result(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "x-cache":
            return value if isinstance(value, str) else value.decode("latin-1")
    return None
