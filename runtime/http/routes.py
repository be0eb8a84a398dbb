"""The KServe v2 / Triton HTTP endpoints, as plain Starlette routes.

Routes take the raw ``Request`` and return raw ``Response``s: no pydantic models or dependency
injection on the hot path. Each handler only translates HTTP to service calls and back.
"""

from __future__ import annotations

from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cachefleet.runtime.composition import RuntimeSlot
from cachefleet.runtime.config import ApiGroup
from cachefleet.runtime.errors import BadRequestError, NotReadyError
from cachefleet.runtime.http.body import read_body
from cachefleet.runtime.http.restricted import ApiGuard
from cachefleet.runtime.http.shared_memory_routes import shared_memory_routes
from cachefleet.runtime.protocol import server_metadata

_JSON = "application/json"
_MODEL_PATHS = ("/v2/models/{model}", "/v2/models/{model}/versions/{version}")


def build_routes(slot: RuntimeSlot, guard: ApiGuard) -> list[BaseRoute]:
    """Every route of the server but infer (the infer front serves it before the router),
    bound to ``slot``.

    Each endpoint is guarded by its API group's restriction (``--http-restricted-api``, judged
    by the app's one ``guard``), with Triton's groups: ``/metrics`` belongs to none, as Triton
    serves it on a port of its own.
    """
    endpoints = Endpoints(slot)
    # Before "/v2/models/{model}", which would take "stats" for a model name.
    statistics = guard("statistics", endpoints.statistics)
    routes: list[BaseRoute] = [
        Route(path, statistics, methods=["GET"])
        for path in ("/v2/models/stats", *(f"{base}/stats" for base in _MODEL_PATHS))
    ]
    for base in _MODEL_PATHS:
        routes += [
            Route(base, guard("metadata", endpoints.model), methods=["GET"]),
            Route(f"{base}/ready", guard("health", endpoints.model_ready), methods=["GET"]),
            Route(f"{base}/config", guard("model-config", endpoints.model_config), methods=["GET"]),
        ]
    repository: ApiGroup = "model-repository"
    return [
        *routes,
        Route("/v2/health/live", guard("health", endpoints.live), methods=["GET"]),
        Route("/v2/health/ready", guard("health", endpoints.ready), methods=["GET"]),
        Route("/v2", guard("metadata", endpoints.server), methods=["GET"]),
        Route("/v2/repository/index", guard(repository, endpoints.index), methods=["POST"]),
        Route(
            "/v2/repository/models/{model}/load",
            guard(repository, endpoints.load),
            methods=["POST"],
        ),
        Route(
            "/v2/repository/models/{model}/unload",
            guard(repository, endpoints.unload),
            methods=["POST"],
        ),
        Route("/v2/models/{model}/cache/flush", guard("cache", endpoints.flush), methods=["POST"]),
        Route("/metrics", endpoints.metrics, methods=["GET"]),
        *shared_memory_routes(slot, guard),
    ]


class Endpoints:
    """One method per endpoint, each finding the runtime in the slot."""

    def __init__(self, slot: RuntimeSlot) -> None:
        self._slot = slot
        self._limit = slot.settings.server.max_request_bytes

    async def live(self, request: Request) -> Response:
        return Response(status_code=200)

    async def ready(self, request: Request) -> Response:
        if unready := self._slot.ready().unready_models():
            raise NotReadyError(_unready_message(unready))
        return Response(status_code=200)

    async def server(self, request: Request) -> Response:
        return _json(server_metadata(self._slot.version))

    async def model(self, request: Request) -> Response:
        return _json(self._slot.ready().service.model_metadata(*_model_path(request)))

    async def model_ready(self, request: Request) -> Response:
        self._slot.ready().service.check_model(*_model_path(request))
        return Response(status_code=200)

    async def model_config(self, request: Request) -> Response:
        return _json(self._slot.ready().service.model_config(*_model_path(request)))

    async def statistics(self, request: Request) -> Response:
        params = request.path_params
        service = self._slot.ready().service
        return _json(service.statistics(params.get("model"), params.get("version") or None))

    async def index(self, request: Request) -> Response:
        service = self._slot.ready().service
        ready_only = _ready_only(await read_body(request, self._limit))
        return _json(service.index(ready_only=ready_only))

    async def load(self, request: Request) -> Response:
        control = self._slot.ready().control
        parameters = _parameters(await read_body(request, self._limit))
        await control.load(request.path_params["model"], parameters)
        return Response(status_code=200)

    async def unload(self, request: Request) -> Response:
        control = self._slot.ready().control
        # The body may carry {"parameters": {"unload_dependents": ...}}: there are no
        # ensembles here, so there are no dependents; it is checked for JSON only.
        _parameters(await read_body(request, self._limit), ignore=("unload_dependents",))
        await control.unload(request.path_params["model"])
        return Response(status_code=200)

    async def flush(self, request: Request) -> Response:
        name = request.path_params["model"]
        runtime = self._slot.ready()
        removed = await runtime.service.flush(name)  # every tier, the memo included
        return _json({"model": name, "removed": removed})

    async def metrics(self, request: Request) -> Response:
        runtime = self._slot.ready()
        return Response(generate_latest(runtime.metrics.registry), media_type=CONTENT_TYPE_LATEST)


def _json(document: Any) -> Response:
    return Response(orjson.dumps(document), media_type=_JSON)


def _model_path(request: Request) -> tuple[str, str | None]:
    params = request.path_params
    return params["model"], params.get("version") or None


def _parameters(body: bytes, ignore: tuple[str, ...] = ()) -> dict[str, Any]:
    """The ``parameters`` object of a repository load/unload body (which may be empty)."""
    if not body.strip():
        return {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        raise BadRequestError(f"malformed JSON in the request body: {error}") from None
    parameters = document.get("parameters", {}) if isinstance(document, dict) else None
    if not isinstance(parameters, dict):
        raise BadRequestError('the request body must be like {"parameters": {...}}')
    return {key: value for key, value in parameters.items() if key not in ignore}


def _ready_only(body: bytes) -> bool:
    """The optional ``{"ready": true}`` body of the repository index request."""
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


def _unready_message(models: list[str]) -> str:
    """Why ``/v2/health/ready`` is 503: the models that did not load (``--strict-readiness``)."""
    return (
        f"not every model is ready (--strict-readiness): {', '.join(models)}; "
        "see the server log, or POST /v2/repository/index"
    )
