"""The HTTP application: the FastAPI app with the infer front before it, over a runtime slot.

``create_app`` does no work: it builds neither models nor a cache. The runtime arrives in the
slot when whoever serves the app opens it (``server``, in the app's lifespan); until then
every endpoint but ``/v2/health/live`` answers 503.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

from fastapi import FastAPI
from starlette.exceptions import HTTPException

from cachefleet.runtime.composition import RuntimeSlot
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.http.errors import handle_error
from cachefleet.runtime.http.infer_endpoint import InferEndpoint
from cachefleet.runtime.http.infer_front import AnswerNow, InferFront, Serve
from cachefleet.runtime.http.infer_request import InferHeads
from cachefleet.runtime.http.routes import build_routes
from cachefleet.runtime.http.traced import TracedInfer

#: The app's lifespan: what runs around serving (opens the runtime into the slot).
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def create_app(
    slot: RuntimeSlot, lifespan: Lifespan | None = None, *, traced: bool = False
) -> InferFront:
    """The HTTP server over ``slot``, as uvicorn serves it; ``traced``: infer requests are
    served in spans (decided once, by ``server.create_server``)."""
    app = FastAPI(
        title="cachefleet",
        version=slot.version,
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # The server exports Prometheus metrics itself; skip FastAPI's per-request telemetry.
        telemetry={"tracing": False, "metrics": False, "logs": False},
        routes=build_routes(slot),
    )
    for error_type in (ServingError, HTTPException, Exception):
        app.add_exception_handler(error_type, handle_error)
    endpoint = InferEndpoint(slot)
    serve: Serve = endpoint.serve
    answer_now: AnswerNow | None = endpoint.answer_now
    if traced:  # every answer in a span: none below ASGI
        serve, answer_now = TracedInfer(serve, slot), None
    return InferFront(app, InferHeads(slot.settings), serve, slot.settings.limits, answer_now)
