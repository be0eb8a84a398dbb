"""The one mapping from runtime errors to gRPC status codes, as Triton's clients expect them.

Triton reports an invalid request as ``INVALID_ARGUMENT``, an unknown model as ``NOT_FOUND``,
a server or model that is not ready as ``UNAVAILABLE`` and a model failure as ``INTERNAL``;
``tritonclient.grpc`` turns each into an ``InferenceServerException`` carrying the code's name
and our message unchanged.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import grpc

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc.handlers import checked
from cachefleet.runtime.grpc.loop_bridge import Aborted

log = logging.getLogger(__name__)

_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.FAILED_PRECONDITION,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
}

Method = TypeVar("Method", bound=Callable[..., Awaitable[Any]])


def status_code(error: ServingError) -> grpc.StatusCode:
    """The gRPC code for ``error``'s HTTP status (another 4xx is INVALID_ARGUMENT, 5xx INTERNAL)."""
    code = _CODES.get(error.status_code)
    if code is not None:
        return code
    return grpc.StatusCode.INVALID_ARGUMENT if error.status_code < 500 else grpc.StatusCode.INTERNAL


def translated(method: Method) -> Method:
    """Wrap a unary method run on the event loop so that errors end the call with the right
    status: a malformed request and runtime errors with their own message, anything else (a bug)
    as INTERNAL with a logged traceback. The method takes the request first and the loop's
    stand-in context (``loop_bridge``) last."""

    @functools.wraps(method)
    async def call(self: Any, request: Any, *rest: Any) -> Any:
        try:
            return await method(self, checked(request), *rest)
        except Aborted:
            raise
        except Exception as error:
            await rest[-1].abort(*error_status(error, method.__name__))

    return cast(Method, call)


def error_status(error: Exception, method: str) -> tuple[grpc.StatusCode, str]:
    """The status and message that end a call of ``method`` failed with ``error`` (a streamed
    request sends the message in band instead): runtime errors keep their own message, anything
    else is a bug, logged with its traceback."""
    if isinstance(error, ServingError):
        if error.status_code >= 500:
            log.warning("gRPC %s: %s", method, error.message)
        return status_code(error), error.message
    log.exception("unexpected error in gRPC %s", method, exc_info=error)
    return grpc.StatusCode.INTERNAL, f"internal server error: {type(error).__name__}"
