"""How the infer endpoint gets its answers: the service's one ``answer``, with or without the
runtime's answer memo (served by ``service.memo_answers``) in front of it.

:class:`ServiceAnswers` decodes the body and renders the answer for HTTP, and that is all.
:class:`MemoizedAnswers` (chosen once, when the runtime has a memo: a local tier vouches for
its answers) adds the memo, as the service serves it to both transports: HTTP supplies only its
request's scope (:func:`http_scope`: the path's names and the binary header length, framed),
the body's digest and the body, and what of its rendered answer the memo keeps (the body and
its headers, so that a hit is sent without rendering anything). Which requests may use the memo,
the hit's order (lookup, in flight, model and local entry confirmed, counted) and what may be
kept are the service's, the same for gRPC.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence

import xxhash

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.http.infer_codec import (
    BodyDecoder,
    InferOutcome,
    answer_headers,
    render,
)
from cachefleet.runtime.http.infer_request import InferHead
from cachefleet.runtime.service import (
    DecodeInThread,
    Decoder,
    InferenceService,
    SharedMemoryRegistry,
)
from cachefleet.runtime.service.memo_answers import (
    Kept,
    KeyLater,
    MemoAnswers,
    MemoEntry,
    MemoKey,
)
from cachefleet.runtime.service.scheduler import OnWait

#: HTTP's domain in the memo: the first bytes of every HTTP request's scope.
_DOMAIN = b"cachefleet.memo.http3"
_LENGTHS = struct.Struct("<QQQ")


@functools.lru_cache(maxsize=1024)
def http_scope(model: str, version: str | None, header_length: int | None) -> bytes:
    """An HTTP infer request's scope in the memo: what besides its body shapes its answer,
    remembered (a fleet's clients send a few models with a few header lengths, over and over).

    The fields are length-prefixed, so they end where their lengths say. The names are the
    path's, before they are resolved (no version, "latest", is ""); the header length goes in
    as decimal text ("" when absent)."""
    name = model.encode()
    named = b"" if version is None else version.encode()
    length = b"" if header_length is None else b"%d" % header_length
    sizes = _LENGTHS.pack(len(name), len(named), len(length))
    return _DOMAIN + sizes + name + named + length


class ServiceAnswers:
    """The service's answer to an HTTP infer request; memoizes nothing."""

    def __init__(self, service: InferenceService, shared_memory: SharedMemoryRegistry) -> None:
        self._service = service
        self._shared_memory = shared_memory

    def scope(self, head: InferHead) -> bytes | None:
        """``head``'s request's scope when the memo may answer it, else None: no memo, not
        for this request, or nothing of its model in the memo (counted as the miss a lookup
        would be, once: :attr:`InferHead.memo_passed`)."""
        return None

    def hasher(self, scope: bytes) -> xxhash.xxh3_128:
        """A hasher to feed the body of a request of ``scope`` to."""
        raise AssertionError("no memo, so no scope")

    def memoized(
        self, scope: bytes, digest: bytes, body: Sequence[bytes], started_ns: int
    ) -> tuple[MemoEntry | None, MemoKey | None]:
        """The memoized answer to the request of ``scope`` with ``body`` (in the pieces it came
        in; its hasher gave ``digest``), counted, and the request's memo key; None, nothing
        counted, when there is none (``started_ns``: ``time.perf_counter_ns()`` when the body
        was in)."""
        return None, None

    async def answer(
        self, head: InferHead, body: bytes, on_wait: OnWait, key: MemoKey | None
    ) -> InferOutcome:
        """The service's answer, rendered (``key``: the request's memo key, when it has one)."""
        return await self._service.answer(
            head.model, head.version, self._decoder(head, body), render, head.directives,
            on_wait, transport="http",
        )  # fmt: skip

    def _decoder(self, head: InferHead, body: bytes) -> Decoder | DecodeInThread:
        """The body's decoder; a large body's decoded in a worker thread."""
        decode = BodyDecoder(body, head.header_length, self._shared_memory)
        return DecodeInThread(decode) if decode.large else decode


class MemoizedAnswers(ServiceAnswers):
    """:class:`ServiceAnswers` with the answer memo in front (see the module)."""

    def __init__(
        self,
        service: InferenceService,
        shared_memory: SharedMemoryRegistry,
        memo: MemoAnswers,
    ) -> None:
        super().__init__(service, shared_memory)
        self.memo = memo

    def scope(self, head: InferHead) -> bytes | None:
        if not head.memo or head.memo_passed:
            return None
        if not self.memo.holds(head.model):  # nothing to find: counted as a miss, once
            head.memo_passed = True
            return None
        return http_scope(head.model, head.version, head.header_length)

    def hasher(self, scope: bytes) -> xxhash.xxh3_128:
        return self.memo.hasher(scope)

    def memoized(
        self, scope: bytes, digest: bytes, body: Sequence[bytes], started_ns: int
    ) -> tuple[MemoEntry | None, MemoKey | None]:
        key = self.memo.key(digest, scope, body)
        return self.memo.hit(key, "http", started_ns), key

    async def answer(
        self, head: InferHead, body: bytes, on_wait: OnWait, key: MemoKey | None
    ) -> InferOutcome:
        """The service's answer, memoized under ``key`` (its body joined) when the service's
        memo keeps it."""
        memo = self.memo
        if key is not None:
            kept: MemoKey | KeyLater = memo.whole(key, body)
        elif head.memo_passed:  # not looked up (its model had no entry): keyed if kept

            def kept() -> MemoKey:
                return memo.key_of(http_scope(head.model, head.version, head.header_length), body)

        else:
            return await super().answer(head, body, on_wait, key)
        memoizing = memo.memoizing(kept, head.model, head.version, render, _kept)
        return await self._service.answer(
            head.model, head.version, self._decoder(head, body), memoizing, head.directives,
            on_wait, transport="http",
        )  # fmt: skip


def _kept(outcome: InferOutcome) -> Kept:
    """What the memo keeps of a rendered answer: its body, and the headers a hit sends."""
    return outcome.body, answer_headers(
        outcome.body, outcome.header_length, outcome.cache_status.encode()
    )


def answers_for(runtime: Runtime) -> ServiceAnswers:
    """The infer endpoint's answers: memoized when the runtime has a memo."""
    if runtime.memo_answers is None:
        return ServiceAnswers(runtime.service, runtime.shared_memory)
    return MemoizedAnswers(runtime.service, runtime.shared_memory, runtime.memo_answers)
