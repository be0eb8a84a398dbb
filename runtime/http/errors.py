"""The one mapping from errors to responses: ``{"error": message}`` with the right status.

``ServingError`` carries its own status; Starlette's HTTPException covers routing (unknown
route 404, wrong method 405); anything else is a bug and answers 500 with a logged traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cachefleet.runtime.errors import OverloadedError, ServingError

log = logging.getLogger(__name__)
_BYPASS = {"X-Cache": "bypass"}


def error_response(
    status_code: int, message: str, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        orjson.dumps({"error": message}),
        status_code=status_code,
        media_type="application/json",
        headers=headers,
    )


async def handle_error(request: Request, error: Exception) -> Response:
    """Exception handler registered for ServingError, HTTPException and Exception."""
    if isinstance(error, ServingError):
        path = request.url.path
        if error.status_code >= 500:
            log.warning("%s %s: %s", request.method, path, error.message)
        # Every infer response says how the cache answered; a refused request never used it.
        headers = dict(_BYPASS) if path.endswith("/infer") else {}
        if isinstance(error, OverloadedError):
            headers["Retry-After"] = str(error.retry_after_s)
        return error_response(error.status_code, error.message, headers or None)
    if isinstance(error, HTTPException):
        return error_response(error.status_code, str(error.detail), error.headers)
    log.exception("unexpected error on %s %s", request.method, request.url.path)
    return error_response(500, f"internal server error: {type(error).__name__}")
