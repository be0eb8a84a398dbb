"""Cache faults, translated from library errors at the tier boundaries.

Internal errors: they never reach an inference response (a faulty cache is a miss). The one
request that lets a tier fault out, a flush, translates it into a 503 in the service layer.
"""

from __future__ import annotations

from typing import Literal

#: The ``kind`` label of ``cachefleet_cache_errors_total``.
#: ``pool``: every pooled connection stayed busy for the whole (short) wait; Redis may be fine.
#: ``forged``: an entry not sealed with the fleet's secret (only with ``--cache-secret``).
ErrorKind = Literal["timeout", "connection", "oom", "pool", "corrupt", "forged", "other"]


class CorruptEntryError(ValueError):
    """Stored bytes that are not a valid entry for the key they were found under."""


class ForgedEntryError(CorruptEntryError):
    """An entry that fails the fleet's MAC: written by someone without the cache secret."""


class CacheTierError(Exception):
    """A tier (Redis) failed; ``kind`` says how, for the errors counter and the breaker."""

    def __init__(self, message: str, kind: ErrorKind) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


class CacheConfigError(ValueError):
    """Settings that cannot make a cache (for example ``--cache redis`` without a URL)."""


def is_outage(kind: ErrorKind) -> bool:
    """Faults that mean Redis is unreachable. An OOM reply means it is up (lookups still work);
    a saturated pool means this process is busy, not that Redis is down."""
    return kind in ("timeout", "connection")
