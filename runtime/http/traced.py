"""The HTTP side of tracing: one server span per inference request.

Put in front of the server only when tracing is on (see ``app.create_server``). For each
``POST .../infer`` it starts a span under the request's W3C trace context, sets it as
:data:`cachefleet.runtime.tracing.current.CURRENT` while the request is answered (the layers
below add the execution times to it), reads the status, ``X-Cache``, the model version and, on
failure, the error message from what is sent, and ends the span. Every way an infer request is
answered passes here: the memo, the full path, and every refusal. Other requests pass through
untouched.
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson
from opentelemetry.util.types import AttributeValue
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cachefleet.runtime.http.state import ServerState
from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.current import CURRENT
from cachefleet.runtime.tracing.propagation import context_from_headers
from cachefleet.runtime.tracing.request_spans import end_request, start_request

_ROUTE = "/v2/models/{model}/infer"
_VERSIONED_ROUTE = "/v2/models/{model}/versions/{version}/infer"


class TracedInfer:
    """An ASGI app that traces inference requests, then calls ``app``."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        #: Named ``app``, as middlewares name the next one: the connection guard finds the limits
        #: through it.
        self.app = app
        self._state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        tracing = self._state.tracing
        if (
            tracing is None
            or scope["type"] != "http"
            or scope["method"] != "POST"
            or not path.endswith("/infer")
        ):
            await self.app(scope, receive, send)
            return
        route = _VERSIONED_ROUTE if "/versions/" in path else _ROUTE
        traced = start_request(
            tracing.tracer,
            f"POST {route}",
            context_from_headers(scope["headers"]),
            _request_attributes(scope, path, route),
        )
        answer = _Answer(send)
        token = CURRENT.set(traced)
        try:
            await self.app(scope, receive, answer.send)
        finally:
            CURRENT.reset(token)
            error = None
            if answer.status >= 400:
                error = (str(answer.status), answer.error_message())
            if answer.model_version is not None:
                traced.span.set_attribute(names.MODEL_VERSION, answer.model_version)
            end_request(
                traced,
                {names.HTTP_STATUS: answer.status},
                cache_result=answer.cache_result,
                error=error,
            )


def _request_attributes(scope: Scope, path: str, route: str) -> Mapping[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        names.TRANSPORT: "http",
        names.HTTP_METHOD: "POST",
        names.HTTP_ROUTE: route,
        names.URL_PATH: path,
        names.URL_SCHEME: scope.get("scheme", "http"),
    }
    parts = path.split("/")  # "", "v2", "models", name[, "versions", version], "infer"
    if len(parts) >= 5:
        attributes[names.MODEL_NAME] = parts[3]
    if len(parts) == 7:
        attributes[names.MODEL_VERSION] = parts[5]
    return attributes


_VERSION_FIELD = b'"model_version":"'


def _model_version(body: bytes) -> str | None:
    """``model_version`` of a response's JSON header, which opens the body (orjson writes it
    without spaces, and a version is digits): found without parsing the outputs."""
    start = body.find(_VERSION_FIELD, 0, 512)
    if start < 0:
        return None
    start += len(_VERSION_FIELD)
    end = body.find(b'"', start, start + 32)
    return body[start:end].decode("latin-1") if end > 0 else None


class _Answer:
    """What was sent: the status, the X-Cache header, an error's body."""

    def __init__(self, send: Send) -> None:
        self._send = send
        #: 499 (nginx's "client closed"): nothing was sent, the client had gone.
        self.status = 499
        self.cache_result: str | None = None
        #: The version that answered, from the response (the request may name none).
        self.model_version: str | None = None
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
            elif self.model_version is None:
                self.model_version = _model_version(body)
        await self._send(message)

    def error_message(self) -> str:
        try:
            document = orjson.loads(self._error_body)
        except orjson.JSONDecodeError:
            return f"HTTP {self.status}"
        message = document.get("error") if isinstance(document, dict) else None
        return message if isinstance(message, str) else f"HTTP {self.status}"
