"""The one mapping from errors to HTTP answers: ``{"error": message}`` with the right status.

``ServingError`` carries its own status; Starlette's HTTPException covers routing (unknown
route 404, wrong method 405); anything else is a bug and answers 500 with a logged traceback.
:func:`error_answer` decides; the Starlette handler and the infer endpoint (a plain ASGI
callable) only send what it decided, so every endpoint refuses the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from cachefleet.runtime.errors import OverloadedError, ServingError

log = logging.getLogger(__name__)
Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class ErrorAnswer:
    """A refusal as it goes out: status, JSON body, and the headers beyond length and type."""

    status: int
    body: bytes
    headers: Headers


def error_answer(error: BaseException, method: str, path: str) -> ErrorAnswer:
    """The answer to ``error`` raised by ``method path`` (logged when it is the server's)."""
    if isinstance(error, ServingError):
        if error.status_code >= 500:
            log.warning("%s %s: %s", method, path, error.message)
        # No X-Cache: it says how the cache answered a request that was answered, and a
        # refusal (403, 400, 404, 413, 503) or a failure (500) was answered by no tier. gRPC
        # likewise sends its x-cache trailer only with an answer.
        headers: Headers = []
        if isinstance(error, OverloadedError):
            headers.append((b"retry-after", b"%d" % error.retry_after_s))
        return _answer(error.status_code, error.message, headers)
    if isinstance(error, HTTPException):
        extra = error.headers or {}
        encoded = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in extra.items()]
        return _answer(error.status_code, str(error.detail), encoded)
    log.exception("unexpected error on %s %s", method, path, exc_info=error)
    return _answer(500, f"internal server error: {type(error).__name__}", [])


async def handle_error(request: Request, error: Exception) -> Response:
    """Exception handler registered for ServingError, HTTPException and Exception."""
    answer = error_answer(error, request.method, request.url.path)
    response = Response(answer.body, status_code=answer.status, media_type="application/json")
    response.raw_headers.extend(answer.headers)
    return response


def _answer(status: int, message: str, headers: Headers) -> ErrorAnswer:
    return ErrorAnswer(status, orjson.dumps({"error": message}), headers)
