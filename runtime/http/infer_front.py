"""The infer front: a plain ASGI callable in front of the FastAPI app, the HTTP path's one seam.

Every request enters here. An infer path (``POST /v2/models/{m}[/versions/{v}]/infer``) is
described once (``infer_request``) and served by the infer endpoint straight from the ASGI
scope, memo hits included, without the router's cost (about 40 microseconds a request);
every other request, and the lifespan, falls through to the application unchanged. Before
either, a request with a transfer coding other than ``chunked`` is refused with 501, on every
route (``transfer_coding``). Tracing,
when the server traces, wraps the endpoint's ``serve`` here, so it sees every infer answer
(the memo's, the full path's, every refusal) and no wrapper around the server can take the
memo away from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.infer_endpoint import refuse, refuse_request
from cachefleet.runtime.http.infer_request import InferHead, InferHeads
from cachefleet.runtime.http.transfer_coding import transfer_coding_refusal

#: Serves a described infer request (``InferEndpoint.serve``, or tracing around it).
Serve = Callable[[InferHead, Scope, Receive, Send], Awaitable[None]]


class InferFront:
    """Hands infer requests to ``serve``, everything else to ``app``."""

    def __init__(
        self, app: ASGIApp, heads: InferHeads, serve: Serve, limits: LimitSettings
    ) -> None:
        #: Named ``app``, as middlewares name the next one.
        self.app = app
        self._heads = heads
        #: The infer endpoint's ``serve``, or tracing around it.
        self.serve = serve
        #: Read by the HTTP protocol's connection guard (see ``uvicorn_protocol``).
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = transfer_coding_refusal(scope["headers"])
            if refusal is not None:
                await refuse_request(send, scope["method"], scope["path"], refusal)
                return
            head = self._heads(scope)
            if head is not None:
                if head.method == "POST":
                    await self.serve(head, scope, receive, send)
                else:
                    await refuse(send, head, _NOT_ALLOWED)
                return
        await self.app(scope, receive, send)


_NOT_ALLOWED = HTTPException(405, headers={"Allow": "POST"})
