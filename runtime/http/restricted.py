"""``--http-restricted-api``: each route checks its API group's header, as Triton's handlers do.

The check is bound to the endpoint a route runs (not to a second reading of the path), so no
spelling of a path can reach an endpoint around it. An open group costs nothing: its endpoints
are not wrapped. A refusal is Triton's: 403 and ``{"error": "This API is restricted,
expecting header '<key>'"}``, raised as :class:`RestrictedApiError` and answered by the one
error mapping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from starlette.requests import Request
from starlette.responses import Response

from cachefleet.runtime.config import ApiGroup, Restriction, by_group
from cachefleet.runtime.errors import ServingError

Endpoint = Callable[[Request], Awaitable[Response]]


class RestrictedApiError(ServingError):
    """The request lacks its API group's header (or carries another value): 403."""

    status_code = 403


def refusal_message(restriction: Restriction) -> str:
    """Triton's words for a request without the header (or with another value)."""
    return f"This API is restricted, expecting header '{restriction.header}'"


class ApiGuard:
    """Wraps the endpoints of restricted groups with their header check."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        self._by_group = by_group(restrictions)

    def restriction(self, group: ApiGroup) -> Restriction | None:
        return self._by_group.get(group)

    def __call__(self, group: ApiGroup, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, or a wrapper that refuses requests without ``group``'s header."""
        restriction = self._by_group.get(group)
        if restriction is None:
            return endpoint
        header = restriction.header.lower().encode()

        async def guarded(request: Request) -> Response:
            if not restriction.admits(presented_value(request.scope["headers"], header)):
                raise RestrictedApiError(refusal_message(restriction))
            return await endpoint(request)

        guarded.__name__ = getattr(endpoint, "__name__", "endpoint")
        return guarded


def presented_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The raw bytes of the first ``name`` header (lower case) among an ASGI scope's, the one a
    restriction judges on every route (the infer route's description reads the same)."""
    for key, value in headers:
        if key == name:
            return value
    return None
