"""The runtime's one error base. Each subclass carries the HTTP status it maps to.

The HTTP layer maps :class:`CachefleetError` to ``{"error": message}`` in exactly one handler;
lower layers raise these (or translate library errors into them at their boundary) and never
build responses themselves.
"""

from __future__ import annotations


class CachefleetError(Exception):
    """Base of every error the runtime reports to a client."""

    status_code: int = 500

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(CachefleetError):
    """The request is malformed or does not match the model (400)."""

    status_code = 400


class ModelNotFoundError(CachefleetError):
    """Unknown model or version (404)."""

    status_code = 404


class PayloadTooLargeError(CachefleetError):
    """The body is over the configured limit (413)."""

    status_code = 413


class NotReadyError(CachefleetError):
    """The server or model cannot serve yet (503)."""

    status_code = 503


class ModelExecutionError(CachefleetError):
    """The model failed while running (500)."""

    status_code = 500
