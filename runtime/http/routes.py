"""The KServe v2 / Triton HTTP endpoints, as plain Starlette routes.

Routes take the raw ``Request`` and return raw ``Response``s: no pydantic models or dependency
injection on the hot path. Each handler only translates HTTP to service calls and back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import BadRequestError, NotReadyError
from cachefleet.runtime.http.body import header_length, read_body
from cachefleet.runtime.http.cache_control import directives_from
from cachefleet.runtime.http.compression import compress_for
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.protocol import server_metadata
from cachefleet.runtime.service import InferenceService

Endpoint = Callable[[Request], Awaitable[Response]]
_JSON = "application/json"
_BINARY = "application/octet-stream"


@dataclass
class ServerState:
    """What the lifespan builds and the routes use; empty until the repository is loaded."""

    settings: RuntimeSettings
    service: InferenceService | None = None
    metrics: RuntimeMetrics | None = None
    version: str = field(default_factory=lambda: _package_version())

    def ready_service(self) -> InferenceService:
        if self.service is None:
            raise NotReadyError("the server is still loading its models")
        return self.service


def _json(document: Any) -> Response:
    return Response(orjson.dumps(document), media_type=_JSON)


def build_routes(state: ServerState) -> list[BaseRoute]:
    """Every route of the server, bound to ``state``."""
    limit = state.settings.server.max_request_bytes

    async def live(request: Request) -> Response:
        return Response(status_code=200)

    async def ready(request: Request) -> Response:
        state.ready_service()
        return Response(status_code=200)

    async def server(request: Request) -> Response:
        return _json(server_metadata(state.version))

    async def model(request: Request) -> Response:
        name, ver = _model_path(request)
        return _json(state.ready_service().model_metadata(name, ver))

    async def model_ready(request: Request) -> Response:
        name, ver = _model_path(request)
        state.ready_service().check_model(name, ver)
        return Response(status_code=200)

    async def model_config(request: Request) -> Response:
        name, ver = _model_path(request)
        return _json(state.ready_service().model_config(name, ver))

    async def infer(request: Request) -> Response:
        service = state.ready_service()
        name, ver = _model_path(request)
        outcome = await service.infer(
            name,
            ver,
            await read_body(request, limit),
            header_length(request),
            directives_from(request.headers.get("cache-control")),
        )
        headers = {"X-Cache": outcome.cache_status.value}
        body, encoding = compress_for(request.headers.get("accept-encoding"), outcome.body)
        if encoding is not None:
            headers["Content-Encoding"] = encoding
        if outcome.header_length is None:
            return Response(body, media_type=_JSON, headers=headers)
        headers["Inference-Header-Content-Length"] = str(outcome.header_length)
        return Response(body, media_type=_BINARY, headers=headers)

    async def index(request: Request) -> Response:
        service = state.ready_service()
        return _json(service.index(ready_only=await _ready_only(request, limit)))

    async def flush(request: Request) -> Response:
        name = request.path_params["model"]
        removed = await state.ready_service().flush(name)
        return _json({"model": name, "removed": removed})

    async def metrics(request: Request) -> Response:
        if state.metrics is None:
            raise NotReadyError("the server is still starting")
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    model_paths = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")
    # Inference first: routes are matched in order, and infer is the hot path.
    routes: list[BaseRoute] = [
        Route(f"{base}/infer", infer, methods=["POST"]) for base in model_paths
    ]
    for base in model_paths:
        routes += [
            Route(base, model, methods=["GET"]),
            Route(f"{base}/ready", model_ready, methods=["GET"]),
            Route(f"{base}/config", model_config, methods=["GET"]),
        ]
    routes += [
        Route("/v2/health/live", live, methods=["GET"]),
        Route("/v2/health/ready", ready, methods=["GET"]),
        Route("/v2", server, methods=["GET"]),
        Route("/v2/repository/index", index, methods=["POST"]),
        Route("/v2/models/{model}/cache/flush", flush, methods=["POST"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    return routes


def _model_path(request: Request) -> tuple[str, str | None]:
    params = request.path_params
    return params["model"], params.get("version") or None


async def _ready_only(request: Request, limit: int) -> bool:
    """The optional ``{"ready": true}`` body of the repository index request."""
    body = await read_body(request, limit)
    if not body.strip():
        return False
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequestError(f"malformed JSON in the request body: {error}") from None
    ready = document.get("ready", False) if isinstance(document, dict) else None
    if not isinstance(ready, bool):
        raise BadRequestError('the index request body must be like {"ready": true}')
    return ready


def _package_version() -> str:
    try:
        return version("cachefleet")
    except PackageNotFoundError:
        return "0.0.0"
