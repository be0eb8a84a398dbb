"""The errors a client sees. Each subclass carries the HTTP status it maps to.

:class:`ServingError` is the one base of errors that become a response: the HTTP layer maps it
to ``{"error": message}`` in exactly one handler. Lower layers raise these, or translate their
own internal errors (a Redis fault, a model that failed to load) into them at the one place a
request meets them, never build responses themselves. Errors that no client ever sees (a
broken model at load time, a corrupt cache entry, a failed benchmark) are plain exceptions of
their own package and carry no status.
"""

from __future__ import annotations

from cachefleet.runtime.config.redaction import redact


class ServingError(Exception):
    """Base of every error the runtime reports to a client."""

    status_code: int = 500

    def __init__(self, message: str) -> None:
        # Every client-facing message passes here: a Redis URL quoted in it loses its password.
        message = redact(message)
        super().__init__(message)
        self.message = message


class BadRequestError(ServingError):
    """The request is malformed or does not match the model (400)."""

    status_code = 400


class ModelNotFoundError(ServingError):
    """Unknown model or version (404)."""

    status_code = 404


class PayloadTooLargeError(ServingError):
    """The body is over the configured limit (413)."""

    status_code = 413


class NotReadyError(ServingError):
    """The server, model or cache cannot serve the request yet (503)."""

    status_code = 503


class OverloadedError(NotReadyError):
    """The server holds as many requests (or request bytes) as it may: retry later (503, with
    ``Retry-After``; gRPC ``UNAVAILABLE``)."""

    retry_after_s = 1


class ModelExecutionError(ServingError):
    """The model failed while running (500)."""

    status_code = 500


class SchedulingTermsError(ServingError):
    """An error that follows from the request's own scheduling terms (its priority level's
    queue, its queue timeout), not from what it asks: identical requests that share one
    computation are never handed another's (they start over on their own terms)."""


class QueueFullError(OverloadedError, SchedulingTermsError):
    """The queue of the request's priority level is full (503; Triton's UNAVAILABLE)."""


class QueueTimeoutError(NotReadyError, SchedulingTermsError):
    """The request's queue timeout passed before it ran (503; Triton's UNAVAILABLE)."""
