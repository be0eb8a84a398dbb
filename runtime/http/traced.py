"""The HTTP side of tracing: one server span per inference request.

Wrapped around the infer endpoint's ``serve`` only when tracing is on (see
``app.create_app``), inside the infer front, so it reads the request's description (route,
model, version) instead of parsing the path again, and whatever wraps the server cannot take
any answer away from it. For each infer request it starts a span under the request's W3C trace
context, sets it as
:data:`cachefleet.runtime.tracing.current.CURRENT` while the request is answered (the layers
below add the model version, the cache's answer and execution times to it), reads the status,
``X-Cache`` and, on failure, the error message from what is sent, and ends the span. Every way
an infer request is answered passes here: the memo, the full path, and every refusal.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from opentelemetry.util.types import AttributeValue
from starlette.types import Message, Receive, Scope, Send

from cachefleet.runtime.composition import RuntimeSlot
from cachefleet.runtime.http.infer_front import Serve
from cachefleet.runtime.http.infer_request import InferHead
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT
from cachefleet.runtime.tracing.propagation import context_from_headers
from cachefleet.runtime.tracing.request_spans import end_request, start_request

_ROUTE = "/v2/models/{model}/infer"
_VERSIONED_ROUTE = "/v2/models/{model}/versions/{version}/infer"


class TracedInfer:
    """Serves an infer request through ``serve`` in a span of its own."""

    def __init__(self, serve: Serve, slot: RuntimeSlot) -> None:
        self._serve = serve
        self._slot = slot

    async def __call__(self, head: InferHead, scope: Scope, receive: Receive, send: Send) -> None:
        runtime = self._slot.runtime
        tracing = runtime.tracing if runtime is not None else None
        if tracing is None:  # the models still load
            await self._serve(head, scope, receive, send)
            return
        template = _ROUTE if head.version is None else _VERSIONED_ROUTE
        traced = start_request(
            tracing.tracer,
            f"POST {template}",
            context_from_headers(scope["headers"]),
            _request_attributes(scope, head, template),
        )
        answer = _Answer(send)
        token = CURRENT.set(traced)
        try:
            await self._serve(head, scope, receive, answer.send)
        finally:
            CURRENT.reset(token)
            error = None
            if answer.status >= 400:
                error = (str(answer.status), answer.error_message())
            end_request(
                traced,
                {names.HTTP_STATUS: answer.status},
                cache_result=answer.cache_result,
                error=error,
            )


def _request_attributes(
    scope: Scope, head: InferHead, template: str
) -> Mapping[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        names.TRANSPORT: "http",
        names.HTTP_METHOD: "POST",
        names.HTTP_ROUTE: template,
        names.URL_PATH: head.path,
        names.URL_SCHEME: scope.get("scheme", "http"),
        names.MODEL_NAME: head.model,
    }
    if head.version is not None:
        attributes[names.MODEL_VERSION] = head.version
    return attributes


class _Answer:
    """What was sent: the status, the X-Cache header, an error's body."""

    def __init__(self, send: Send) -> None:
        self._send = send
        #: 499 (nginx's "client closed"): nothing was sent, the client had gone.
        self.status = 499
        self.cache_result: str | None = None
        self._error_body = b""

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            for name, value in message.get("headers", ()):
                if name.lower() == b"x-cache":
                    self.cache_result = value.decode("latin-1")
        elif message["type"] == "http.response.body":
            body = message.get("body", b"")
            if self.status >= 400:
                self._error_body += body
        await self._send(message)

    def error_message(self) -> str:
        try:
            document = orjson.loads(self._error_body)
        except orjson.JSONDecodeError:
            return f"HTTP {self.status}"
        message = document.get("error") if isinstance(document, dict) else None
        return message if isinstance(message, str) else f"HTTP {self.status}"
