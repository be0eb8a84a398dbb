"""Triton's shared-memory endpoints over HTTP: thin routes over the service's registry.

``/v2/systemsharedmemory[/region/{name}]/status`` (GET), ``/region/{name}/register`` and
``[/region/{name}]/unregister`` (POST), and the same under ``/v2/cudasharedmemory`` (where
registering is refused: CUDA shared memory is not supported).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from cachefleet.runtime.composition import RuntimeSlot
from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.http.body import read_body
from cachefleet.runtime.http.restricted import ApiGuard

_JSON = "application/json"


def shared_memory_routes(slot: RuntimeSlot, guard: ApiGuard) -> list[BaseRoute]:
    """Every shared-memory route, each guarded as the ``shared-memory`` API group."""
    endpoints = SharedMemoryEndpoints(slot)
    status = guard("shared-memory", endpoints.status)
    register = guard("shared-memory", endpoints.register)
    unregister = guard("shared-memory", endpoints.unregister)
    routes: list[BaseRoute] = []
    for kind in ("system", "cuda"):
        base = f"/v2/{kind}sharedmemory"
        routes += [
            Route(f"{base}/status", status, methods=["GET"]),
            Route(f"{base}/region/{{name}}/status", status, methods=["GET"]),
            Route(f"{base}/region/{{name}}/register", register, methods=["POST"]),
            Route(f"{base}/unregister", unregister, methods=["POST"]),
            Route(f"{base}/region/{{name}}/unregister", unregister, methods=["POST"]),
        ]
    return routes


class SharedMemoryEndpoints:
    def __init__(self, slot: RuntimeSlot) -> None:
        self._slot = slot
        self._limit = slot.settings.server.max_request_bytes

    async def status(self, request: Request) -> Response:
        registry = self._slot.ready().shared_memory
        name = request.path_params.get("name")
        if _is_cuda(request):
            return _json(registry.cuda_status(name))
        return _json(registry.system_status(name))

    async def register(self, request: Request) -> Response:
        registry = self._slot.ready().shared_memory
        name = request.path_params["name"]
        body = _object(await read_body(request, self._limit))
        if _is_cuda(request):
            registry.register_cuda(name, body.get("device_id", 0), body.get("byte_size", 0))
        else:
            registry.register_system(
                name, body.get("key", ""), body.get("offset", 0), body.get("byte_size", 0)
            )
        return Response(status_code=200)

    async def unregister(self, request: Request) -> Response:
        registry = self._slot.ready().shared_memory
        name = request.path_params.get("name")
        if _is_cuda(request):
            registry.unregister_cuda(name)
        else:
            registry.unregister_system(name)
        return Response(status_code=200)


def _is_cuda(request: Request) -> bool:
    return request.url.path.startswith("/v2/cudasharedmemory")


def _object(body: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError as error:
        raise BadRequestError(f"malformed JSON in the request body: {error}") from None
    if not isinstance(document, dict):
        raise BadRequestError("the request body must be a JSON object")
    return document


def _json(document: Any) -> Response:
    return Response(orjson.dumps(document), media_type=_JSON)
