"""The client's cache directives, from ``Cache-Control``: an HTTP header, or gRPC request
metadata of the same name, so that both transports opt out of the cache the same way (the
request parameter ``"cache": false`` is read from the decoded request)."""

from __future__ import annotations

from cachefleet.runtime.cache.api import CacheDirectives

_DEFAULT = CacheDirectives()
_NO_CACHE = CacheDirectives(lookup=False, store=True)
_NO_STORE = CacheDirectives(lookup=False, store=False)


def directives_from(cache_control: str | None) -> CacheDirectives:
    """``no-store`` skips lookup and insert; ``no-cache`` skips only the lookup."""
    if not cache_control:
        return _DEFAULT
    tokens = {token.strip().lower() for token in cache_control.split(",")}
    if "no-store" in tokens:
        return _NO_STORE
    if "no-cache" in tokens:
        return _NO_CACHE
    return _DEFAULT
