"""Builds the response cache that the settings ask for."""

from __future__ import annotations

from cachefleet.runtime.cache.api import NullCache, ResponseCache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics


def build_cache(settings: RuntimeSettings, metrics: RuntimeMetrics) -> ResponseCache:
    """The cache for ``settings.cache.mode``. Nothing connects here: ``start()`` does."""
    return NullCache()
