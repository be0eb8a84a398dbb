"""Cache faults, translated from library errors at the tier boundaries.

They never reach an inference response (a faulty cache is a miss); only the admin paths
(``flush``) let them out, as 503s through the HTTP layer's one error handler.
"""

from __future__ import annotations

from typing import Literal

from cachefleet.runtime.errors import CachefleetError, NotReadyError

#: The ``kind`` label of ``cachefleet_cache_errors_total``.
#: ``pool``: every pooled connection stayed busy for the whole (short) wait; Redis may be fine.
ErrorKind = Literal["timeout", "connection", "oom", "pool", "corrupt", "other"]


class CorruptEntryError(CachefleetError):
    """Stored bytes that are not a valid entry for the key they were found under."""


class CacheTierError(NotReadyError):
    """A tier (Redis) failed; ``kind`` says how, for the errors counter and the breaker."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


class CacheConfigError(CachefleetError):
    """Settings that cannot make a cache (for example ``--cache redis`` without a URL)."""
