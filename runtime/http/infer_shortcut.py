"""The infer route answered straight from the ASGI scope, in front of the application.

A cache hit on a small model costs a few tens of microseconds of real work; Starlette's
routing, middleware stack, ``Request`` object and exception machinery cost more than that.
So ``POST /v2/models/{m}[/versions/{v}]/infer`` goes straight to the infer endpoint (the very
one the application's routes hold), and every other request (and the lifespan) falls through
to the application unchanged. Nothing is answered here: it only chooses the way in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Receive, Scope, Send

from cachefleet.runtime.config import LimitSettings
from cachefleet.runtime.http.infer_endpoint import InferEndpoint

if TYPE_CHECKING:  # memo_front matches its paths with infer_route, below
    from cachefleet.runtime.http.memo_front import MemoFront


def infer_route(path: str) -> tuple[str, str | None] | None:
    """``(model, version)`` of an infer path, None for any other path.

    Matches what the Starlette routes match: ``/v2/models/{m}/infer`` and
    ``/v2/models/{m}/versions/{v}/infer``, each segment non-empty and free of ``/``.
    """
    if not path.startswith("/v2/models/") or not path.endswith("/infer"):
        return None
    parts = path[11:-6].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return None


class InferShortcut:
    """Hands infer requests to ``endpoint``, everything else to ``app``."""

    def __init__(
        self, app: ASGIApp, endpoint: InferEndpoint, limits: LimitSettings, memo_front: MemoFront
    ) -> None:
        self.app = app
        self._endpoint = endpoint
        #: Read by the HTTP protocol's connection guard (see ``connection_guard``).
        self.limits = limits
        #: Read by the HTTP protocol, which answers memoized requests itself (``memo_protocol``).
        self.memo_front = memo_front

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = infer_route(scope["path"])
            if route is not None:
                await self._endpoint.serve(scope, receive, send, *route)
                return
        await self.app(scope, receive, send)
