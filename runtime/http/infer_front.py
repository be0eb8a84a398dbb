"""The infer front: a plain ASGI callable in front of the FastAPI app, the HTTP path's one seam.

Every request enters here. An infer path (``POST /v2/models/{m}[/versions/{v}]/infer``) is
described once (``infer_request``) and served by the infer endpoint straight from the ASGI
scope, memo hits included, without the router's cost (about 40 microseconds a request);
every other request, and the lifespan, falls through to the application unchanged. Before
either, a request with a transfer coding other than ``chunked`` is refused with 501, on every
route (``transfer_coding``). Tracing,
when the server traces, wraps the endpoint's ``serve`` here, so it sees every infer answer
(the memo's, the full path's, every refusal) and no wrapper around the server can take the
memo away from it. Without tracing, the front also hands the HTTP protocol the endpoint's
``answer_now``, with which it answers a memo hit before the request becomes an ASGI task
(``uvicorn_protocol``); whatever it does not answer comes here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.answer_charge import AnswerCharge
from cachefleet.runtime.http.infer_endpoint import refuse, refuse_request
from cachefleet.runtime.http.infer_request import HEAD, InferHead, InferHeads
from cachefleet.runtime.http.transfer_coding import transfer_coding_refusal
from cachefleet.runtime.service.memo_answers import MemoEntry

#: Serves a described infer request (``InferEndpoint.serve``, or tracing around it).
Serve = Callable[[InferHead, Scope, Receive, Send], Awaitable[None]]
#: The memo's answer to a described request with its whole plain body, when it can be given at
#: once (``InferEndpoint.answer_now``); None: ``Serve`` answers it.
AnswerNow = Callable[[InferHead, list[bytes]], tuple[MemoEntry, AnswerCharge] | None]


class InferFront:
    """Hands infer requests to ``serve``, everything else to ``app``."""

    def __init__(
        self,
        app: ASGIApp,
        heads: InferHeads,
        serve: Serve,
        limits: LimitSettings,
        answer_now: AnswerNow | None = None,
    ) -> None:
        #: Named ``app``, as middlewares name the next one.
        self.app = app
        #: Describes infer requests; read by the HTTP protocol too (see ``uvicorn_protocol``).
        self.heads = heads
        #: The infer endpoint's ``serve``, or tracing around it.
        self.serve = serve
        #: Read by the HTTP protocol's connection guard (see ``uvicorn_protocol``).
        self.limits = limits
        #: The memo's answers that the HTTP protocol may give below ASGI, before a task is
        #: made for the request (None when tracing, which must see every answer).
        self.answer_now = answer_now

    def describe(
        self, path: str, headers: list[tuple[bytes, bytes]]
    ) -> tuple[bool, InferHead | None]:
        """What :meth:`__call__` makes of a ``POST`` to ``path`` with ``headers``: whether it
        passes the transfer-coding check (False: the ASGI path refuses it, so nothing is handed
        on), and its head (None: not an infer request). The HTTP protocol describes a request
        it may hold with this and hands the result on with it (``infer_request.HEAD``), so the
        ASGI path does not describe it again."""
        if transfer_coding_refusal(headers) is not None:
            return False, None
        scope = {"type": "http", "method": "POST", "path": path, "headers": headers}
        return True, self.heads(scope)

    @staticmethod
    def may_answer_now(head: InferHead) -> bool:
        """Whether the memo may answer ``head``'s request as it is (no body to inflate, no
        answer to compress): what the HTTP protocol may ask ``answer_now`` about."""
        return head.memo and head.encoding is None and head.accept is None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            extensions = scope.get("extensions")
            if extensions is not None and HEAD in extensions:
                # Described already by the HTTP protocol, from these very headers (``describe``;
                # None: no infer request).
                head = extensions[HEAD]
            else:
                refusal = transfer_coding_refusal(scope["headers"])
                if refusal is not None:
                    await refuse_request(send, scope["method"], scope["path"], refusal)
                    return
                head = self.heads(scope)
            if head is not None:
                if head.method == "POST":
                    await self.serve(head, scope, receive, send)
                else:
                    await refuse(send, head, _NOT_ALLOWED)
                return
        await self.app(scope, receive, send)


_NOT_ALLOWED = HTTPException(405, headers={"Allow": "POST"})
