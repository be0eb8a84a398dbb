"""Answers from the memo of rendered responses: the cheapest way a request can be served.

A memoized answer is a local cache hit whose response was rendered before. Serving one must
still count everything a hit counts (the request and its duration, the cache hit, its lookup
time, Triton's counters, the statistics extension) and nothing else can run in between: the
whole answer is one synchronous call, with no task, no coroutine and no await. It is written
down in the request ledger as every request is; its cache lookup is its whole span.
"""

from __future__ import annotations

from blake3 import blake3

from cachefleet.runtime.cache.api import CacheDirectives, CacheStatus, ResponseCache
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import Model, ModelRepository
from cachefleet.runtime.service.memo import Memoized, ResponseMemo, digest_hasher
from cachefleet.runtime.service.request_ledger import RequestLedger


class MemoAnswers:
    """Looks requests up in the memo and, on a live entry, answers and counts them."""

    def __init__(
        self,
        memo: ResponseMemo,
        repository: ModelRepository,
        cache: ResponseCache,
        ledger: RequestLedger,
        *,
        cache_all: bool,
    ) -> None:
        self.memo = memo
        self._repository = repository
        self._cache = cache
        self._ledger = ledger
        self._cache_all = cache_all

    def hasher(
        self,
        name: str,
        version: str | None,
        header_length: int | None,
        directives: CacheDirectives,
    ) -> blake3 | None:
        """A hasher for the request's digest (to be fed its body), or None when the memo
        cannot answer it: the cache is skipped, the model does not cache, or it is not loaded
        (the request's own path then says so)."""
        if not directives.lookup:
            return None
        try:
            model = self._repository.get(name, version)
        except ServingError:
            return None
        if not (model.config.response_cache or self._cache_all):
            return None
        return digest_hasher(name, version, header_length)

    def answer(
        self, name: str, version: str | None, digest: bytes, started_ns: int
    ) -> Memoized | None:
        """The memoized answer, counted as the local hit it is, if its model and its local-tier
        entry are still the live ones; else None, nothing counted (a stale entry is dropped).

        ``started_ns`` (``time.perf_counter_ns()``): when the request's body was in.
        """
        found = self.memo.get(digest)
        if found is None:
            return None
        try:
            model = self._repository.get(name, version)
        except ServingError:
            return None  # its own path refuses it, and counts the failure
        now_ns = None
        if found.model is model:
            now_ns = self._cache.confirm_local_hit(found.key, found.entry, started_ns)
        if now_ns is None:
            self.memo.discard(digest)
            return None
        passage = self._ledger.open(model, "http", started_ns)
        passage.cache_status, passage.cache_ns = CacheStatus.HIT_LOCAL, now_ns - started_ns
        self._ledger.succeeded(passage)
        return found

    def keep(
        self,
        digest: bytes,
        model: Model,
        key: CacheKey,
        body: bytes,
        header_length: int | None,
    ) -> None:
        """Memoize a response just rendered from ``key``'s local entry, if it still lives."""
        entry = self._cache.local_entry(key)
        if entry is not None:
            self.memo.put(digest, model, key, entry, body, header_length)
