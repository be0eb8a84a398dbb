"""The HTTP side of tracing: each inference request's W3C trace context, extracted before it is
answered.

Put in front of the server only when tracing is on (see ``app.create_server``); then for each
``POST .../infer`` it sets :data:`cachefleet.runtime.tracing.origin.CURRENT` for the time the
request is answered, and the service's ledger makes the span under it. Other requests pass
through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.util.types import AttributeValue
from starlette.types import ASGIApp, Receive, Scope, Send

from cachefleet.runtime.tracing import attributes as names
from cachefleet.runtime.tracing.origin import CURRENT, Origin
from cachefleet.runtime.tracing.propagation import context_from_headers

_ROUTE = "/v2/models/{model}/infer"
_VERSIONED_ROUTE = "/v2/models/{model}/versions/{version}/infer"


def _status(code: int) -> Mapping[str, AttributeValue]:
    return {names.HTTP_STATUS: code}


class TracedInfer:
    """An ASGI app that sets the trace origin of inference requests, then calls ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        #: Named ``app``, as middlewares name the next one: the connection guard finds the limits
        #: through it.
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or scope["method"] != "POST" or not path.endswith("/infer"):
            await self.app(scope, receive, send)
            return
        route = _VERSIONED_ROUTE if "/versions/" in path else _ROUTE
        origin = Origin(
            parent=context_from_headers(scope["headers"]),
            name=f"POST {route}",
            attributes={
                names.TRANSPORT: "http",
                names.HTTP_METHOD: "POST",
                names.HTTP_ROUTE: route,
                names.URL_PATH: path,
                names.URL_SCHEME: scope.get("scheme", "http"),
            },
            status=_status,
        )
        token = CURRENT.set(origin)
        try:
            await self.app(scope, receive, send)
        finally:
            CURRENT.reset(token)
