"""``--http-restricted-api``: each route checks its API group's header, as Triton's handlers do.

The check is bound to the endpoint a route runs (not to a second reading of the path), so no
spelling of a path can reach an endpoint around it. An open group costs nothing: its endpoints
are not wrapped. One :class:`ApiGuard` is built per app (``app.create_app``) and judges every
group one way: the raw bytes of the first header of the group's name, whoever read them (a
routed endpoint's wrapper, or the infer route's description in its one pass over the headers).
A refusal is Triton's: 403 and
``{"error": "This API is restricted, expecting header '<key>'"}``, raised as
:class:`RestrictedApiError` and answered by the one error mapping.
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
    """Judges requests by their API group's restriction; wraps routed endpoints with it."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        self._by_group = by_group(restrictions)

    def header(self, group: ApiGroup) -> bytes | None:
        """The (lower-case) header ``group``'s restriction reads; None when it is open."""
        restriction = self._by_group.get(group)
        return None if restriction is None else restriction.header.lower().encode()

    def refusal(self, group: ApiGroup, presented: bytes | None) -> str | None:
        """Why a request of ``group`` that presents ``presented`` (the raw bytes of the first
        header :meth:`header` names; None: absent) is refused; None when it is admitted."""
        restriction = self._by_group.get(group)
        if restriction is None or restriction.admits(presented):
            return None
        return refusal_message(restriction)

    def __call__(self, group: ApiGroup, endpoint: Endpoint) -> Endpoint:
        """``endpoint``, or a wrapper that refuses requests without ``group``'s header."""
        header = self.header(group)
        if header is None:
            return endpoint

        async def guarded(request: Request) -> Response:
            refusal = self.refusal(group, presented_value(request.scope["headers"], header))
            if refusal is not None:
                raise RestrictedApiError(refusal)
            return await endpoint(request)

        guarded.__name__ = getattr(endpoint, "__name__", "endpoint")
        return guarded


def presented_value(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The raw bytes of the first ``name`` header (lower case) among an ASGI scope's: what
    :meth:`ApiGuard.refusal` judges (the infer route's description takes the same in its pass)."""
    for key, value in headers:
        if key == name:
            return value
    return None
