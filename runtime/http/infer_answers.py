"""How the infer endpoint gets its answers: the service's one ``answer``, with or without the
runtime's answer memo (``cache.memo``) in front of it.

:class:`ServiceAnswers` decodes the body and renders the answer for HTTP, and that is all.
:class:`MemoizedAnswers` (chosen once, when the runtime has a memo: a local tier vouches for
its answers) adds the memo: a byte-identical repeat of a request whose last answer was a local
hit is answered with the bytes (and headers) rendered then, for as long as the local entry
they came from lives (its liveness token says so, and counts the hit as the cache counts one).

Serving a memoized answer counts everything a hit counts (the request and its duration in the
request ledger, the cache hit and its lookup through the token) in one synchronous call, with
no task, no coroutine and no await between the lookup and the counting. The memo holds only
local hits, so it follows cache admission without asking it: while admission skips the local
tier for a model there are no local hits of it, and nothing of it is memoized.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.memo import MemoEntry, MemoKey, ResponseMemo
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.http.infer_codec import (
    HIT_LOCAL,
    BodyDecoder,
    InferOutcome,
    answer_headers,
    render,
)
from cachefleet.runtime.http.infer_request import InferHead
from cachefleet.runtime.service import InferAnswer, InferenceService, SharedMemoryRegistry
from cachefleet.runtime.service.request_ledger import RequestLedger
from cachefleet.runtime.service.scheduler import OnWait


class ServiceAnswers:
    """The service's answer to an HTTP infer request; memoizes nothing."""

    def __init__(self, service: InferenceService, shared_memory: SharedMemoryRegistry) -> None:
        self._service = service
        self._shared_memory = shared_memory

    def hasher(self, head: InferHead) -> xxhash.xxh3_128 | None:
        """A hasher to feed the body to when the memo may answer ``head``'s request."""
        return None

    def memoized(
        self, head: InferHead, digest: bytes, body: Sequence[bytes], started_ns: int
    ) -> tuple[MemoEntry | None, MemoKey | None]:
        """The memoized answer to ``head``'s request with ``body`` (in the pieces it came in;
        its hasher gave ``digest``), counted, and the request's memo key; None, nothing counted,
        when there is none (``started_ns``: ``time.perf_counter_ns()`` when the body was in)."""
        return None, None

    async def answer(
        self, head: InferHead, body: bytes, on_wait: OnWait, key: MemoKey | None
    ) -> InferOutcome:
        """The service's answer, rendered (``key``: the request's memo key, when it has one)."""
        decode = await self._decoder(head, body)
        return await self._service.answer(
            head.model, head.version, decode, render, head.directives, on_wait, transport="http"
        )

    async def _decoder(self, head: InferHead, body: bytes) -> BodyDecoder:
        """The body's decoder; a large body decoded ahead, in a worker thread, for the model
        it names (a model that does not exist is left to the service, which refuses it)."""
        decode = BodyDecoder(body, head.header_length, self._shared_memory)
        if decode.large:
            try:
                config = self._service.model(head.model, head.version).config
            except ServingError:
                return decode
            await decode.prepare(config)
        return decode


class MemoizedAnswers(ServiceAnswers):
    """:class:`ServiceAnswers` with the answer memo in front (see the module)."""

    def __init__(
        self,
        service: InferenceService,
        shared_memory: SharedMemoryRegistry,
        memo: ResponseMemo,
        ledger: RequestLedger,
    ) -> None:
        super().__init__(service, shared_memory)
        self.memo = memo
        self._ledger = ledger

    def hasher(self, head: InferHead) -> xxhash.xxh3_128 | None:
        if not head.memo:
            return None
        return self.memo.http_hasher(head.model, head.version, head.header_length)

    def memoized(
        self, head: InferHead, digest: bytes, body: Sequence[bytes], started_ns: int
    ) -> tuple[MemoEntry | None, MemoKey | None]:
        key = self.memo.http_key(digest, head.model, head.version, head.header_length, body)
        found = self.memo.lookup(key)
        if found is None:
            return None, key
        # Resolved now, with the body in: an unload or reload may have come while it arrived.
        try:
            model = self._service.model(head.model, head.version)
        except ServingError:
            model = None  # its own path refuses it, and counts the failure
        now_ns = found.token.confirm(started_ns) if found.model is model else None
        if model is None or now_ns is None:
            self.memo.delete(key)  # stale: its entry or its model is gone
            return None, key
        passage = self._ledger.open(model, "http", started_ns)
        passage.cache_status, passage.cache_ns = CacheStatus.HIT_LOCAL, now_ns - started_ns
        self._ledger.succeeded(passage)
        return found, key

    async def answer(
        self, head: InferHead, body: bytes, on_wait: OnWait, key: MemoKey | None
    ) -> InferOutcome:
        """The service's answer, memoized under ``key`` when it was a local hit (from the
        second sighting on: a one-off request costs nothing more) and its inputs and outputs
        are all in its body and answer (no shared memory)."""
        if key is None:
            return await super().answer(head, body, on_wait, key)
        decode = await self._decoder(head, body)
        # Kept with its body whole: every later request is compared with it piece by piece.
        key = self.memo.http_key(key.digest, head.model, head.version, head.header_length, (body,))

        def memoizing(answer: InferAnswer) -> InferOutcome:
            outcome = render(answer)
            token = answer.local_entry
            outputs = answer.request.outputs
            shared = decode.read_shared_memory or any(o.shared_memory is not None for o in outputs)
            if token is not None and not shared:
                headers = answer_headers(outcome.body, outcome.header_length, HIT_LOCAL)
                entry = MemoEntry(
                    outcome.body, answer.model, token, head.model, head.version or "", headers
                )
                self.memo.insert(key, entry)
            return outcome

        return await self._service.answer(
            head.model, head.version, decode, memoizing, head.directives, on_wait,
            transport="http",
        )  # fmt: skip


def answers_for(runtime: Runtime) -> ServiceAnswers:
    """The infer endpoint's answers: memoized when the runtime has a memo."""
    if runtime.memo is None:
        return ServiceAnswers(runtime.service, runtime.shared_memory)
    return MemoizedAnswers(runtime.service, runtime.shared_memory, runtime.memo, runtime.ledger)
