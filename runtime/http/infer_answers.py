"""How the infer endpoint gets its answers: the service's one ``answer``, with or without a
memo of rendered responses in front of it.

:class:`ServiceAnswers` decodes the body and renders the answer for HTTP, and that is all.
:class:`MemoizedAnswers` (chosen once, where a local tier can vouch for what it keeps:
``local`` and ``tiered``) wraps it: a byte-identical repeat of a request whose last answer was a
local hit is answered with the bytes rendered then, for as long as the local entry they came
from lives (its liveness token says so, and counts the hit as the cache counts one).

Serving a memoized answer counts everything a hit counts (the request and its duration in the
request ledger, the cache hit and its lookup through the token) in one synchronous call, with
no task, no coroutine and no await between the lookup and the counting.
"""

from __future__ import annotations

from blake3 import blake3

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.api import CacheDirectives, CacheStatus
from cachefleet.runtime.cache.memo import MemoEntry, ResponseMemo, http_hasher
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.http.infer_codec import (
    HIT_LOCAL,
    BodyDecoder,
    InferOutcome,
    answer_headers,
    render,
)
from cachefleet.runtime.service import InferAnswer, InferenceService, SharedMemoryRegistry
from cachefleet.runtime.service.request_ledger import RequestLedger
from cachefleet.runtime.service.scheduler import OnWait


class ServiceAnswers:
    """The service's answer to an HTTP infer request; memoizes nothing."""

    def __init__(self, service: InferenceService, shared_memory: SharedMemoryRegistry) -> None:
        self._service = service
        self._shared_memory = shared_memory

    def hasher(
        self, name: str, version: str | None, header_length: int | None, directives: CacheDirectives
    ) -> blake3 | None:
        """A hasher to feed the body to when a memoized answer may serve the request."""
        return None

    def memoized(
        self, name: str, version: str | None, digest: bytes, started_ns: int
    ) -> MemoEntry | None:
        """The memoized answer for ``digest``, counted; None, nothing counted, when there is
        none (``started_ns``: ``time.perf_counter_ns()`` when the body was in)."""
        return None

    async def answer(
        self,
        name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait,
        digest: bytes | None,
    ) -> InferOutcome:
        """The service's answer, rendered (``digest``: the body's, when it was hashed)."""
        decode = await self._decoder(name, version, body, header_length)
        return await self._service.answer(
            name, version, decode, render, directives, on_wait, transport="http"
        )

    async def _decoder(
        self, name: str, version: str | None, body: bytes, header_length: int | None
    ) -> BodyDecoder:
        """The body's decoder; a large body decoded ahead, in a worker thread, for the model
        it names (a model that does not exist is left to the service, which refuses it)."""
        decode = BodyDecoder(body, header_length, self._shared_memory)
        if decode.large:
            try:
                config = self._service.model(name, version).config
            except ServingError:
                return decode
            await decode.prepare(config)
        return decode


class MemoizedAnswers(ServiceAnswers):
    """:class:`ServiceAnswers` with a memo of rendered responses in front (see the module)."""

    def __init__(
        self,
        service: InferenceService,
        shared_memory: SharedMemoryRegistry,
        memo: ResponseMemo,
        ledger: RequestLedger,
        admission: AdmissionPolicy,
    ) -> None:
        super().__init__(service, shared_memory)
        self.memo = memo
        self._ledger = ledger
        self._admission = admission

    def hasher(
        self, name: str, version: str | None, header_length: int | None, directives: CacheDirectives
    ) -> blake3 | None:
        """None when the memo cannot answer: the cache is skipped, the model does not cache,
        or it is not loaded (the request's own path then says so), or admission skips the
        local tier for it. The memo only ever holds local hits, so a model whose local tier is
        skipped (its requests rarely repeat) would pay for hashing every body and find
        nothing; its few probes that hit are answered, and counted, by the cache itself."""
        if not directives.lookup:
            return None
        try:
            model = self._service.model(name, version)
        except ServingError:
            return None
        if not self._service.caches(model):
            return None
        if not self._admission.admitted(model.name, "local", model.version):
            return None
        return http_hasher(name, version, header_length)

    def memoized(
        self, name: str, version: str | None, digest: bytes, started_ns: int
    ) -> MemoEntry | None:
        found = self.memo.get(digest)
        if found is None:
            return None
        try:
            model = self._service.model(name, version)
        except ServingError:
            return None  # its own path refuses it, and counts the failure
        now_ns = found.token.confirm(started_ns) if found.model is model else None
        if now_ns is None:
            self.memo.discard(digest)  # stale: its entry or its model is gone
            return None
        passage = self._ledger.open(model, "http", started_ns)
        passage.cache_status, passage.cache_ns = CacheStatus.HIT_LOCAL, now_ns - started_ns
        self._ledger.succeeded(passage)
        return found

    async def answer(
        self,
        name: str,
        version: str | None,
        body: bytes,
        header_length: int | None,
        directives: CacheDirectives,
        on_wait: OnWait,
        digest: bytes | None,
    ) -> InferOutcome:
        """The service's answer, memoized under ``digest`` when it was a local hit (from the
        second sighting on: a one-off request costs nothing more) and its inputs and outputs
        are all in its body and response (no shared memory)."""
        if digest is None:
            return await super().answer(
                name, version, body, header_length, directives, on_wait, digest
            )
        decode = await self._decoder(name, version, body, header_length)
        key = digest

        def memoizing(answer: InferAnswer) -> InferOutcome:
            outcome = render(answer)
            token = answer.local_entry
            outputs = answer.request.outputs
            shared = decode.read_shared_memory or any(o.shared_memory is not None for o in outputs)
            if token is not None and not shared:
                self.memo.put(
                    key, outcome.body, answer.model, token, name, version or "",
                    answer_headers(outcome.body, outcome.header_length, HIT_LOCAL),
                )  # fmt: skip
            return outcome

        return await self._service.answer(
            name, version, decode, memoizing, directives, on_wait, transport="http"
        )


def answers_for(runtime: Runtime) -> ServiceAnswers:
    """The infer endpoint's answers: memoized when the runtime has a memo (a local tier can
    vouch for its answers: ``local``, ``tiered``)."""
    if runtime.memo is None:
        return ServiceAnswers(runtime.service, runtime.shared_memory)
    return MemoizedAnswers(
        runtime.service, runtime.shared_memory, runtime.memo, runtime.ledger, runtime.admission
    )
