"""The answer memo as the service serves it to both transports: one hit, one memoizing render.

The memo (``cache.memo``) keeps rendered answers by the exact request bytes they answer. This is
everything a transport does with it, decided once, so HTTP and gRPC cannot drift apart:

- Whether a request may be answered from it (:meth:`MemoAnswers.applies`): unless its cache
  directives skip the lookup (``no-cache``, ``no-store``: HTTP's ``Cache-Control`` header and
  gRPC's ``cache-control`` metadata alike). The request parameter ``"cache": false`` is in the
  request's bytes: its answer is a bypass, which is never memoized.
- Its key: the transport frames its request as a *scope* (its domain, and whatever besides the
  body shapes the answer) and hands over the body, whole or in the pieces it came in
  (:attr:`hasher` and :attr:`key`, or :meth:`key_of`). The memo compares; the digest only finds.
- Whether asking is of any use (:attr:`holds`): a request whose model has no entry in the memo
  is not hashed nor looked up, and counted as the miss its lookup would be; if its answer is
  then kept, its key is made for the insert (:meth:`memoizing` takes a key or a way to make
  one). The memo holds only local hits, so this follows cache admission without asking it:
  while admission skips the local tier for a model there are no local hits of it to keep,
  and a probe's hit (admission still probes a skipped tier) is kept as any local hit is, after
  which that model's requests are looked up again.
- A hit (:meth:`hit`): one synchronous call, no await, the same on the event loop and on a gRPC
  server thread: the lookup; then the request written down in the ledger
  (``RequestLedger.memo_hit``): in flight first, so that an unload waits for it; its model
  resolved again from the names the request gave (an unload or a reload may have come since
  the entry was kept) and compared with the one the entry was rendered for, and its local entry
  confirmed (which counts the local hit as a lookup does); counted as a local hit. A stale
  entry is closed uncounted and dropped, and the request takes the service's path, which counts
  it.
- An insert (:meth:`memoizing`): the transport's renderer, wrapped: the answer to a request that
  was a local hit and whose bytes hold everything it depends on and gives
  (``InferRequest.shareable``: no shared memory either way) is kept as the bytes the transport
  rendered, with the transport's headers for them.

The request budget is not here: every inference request is admitted at its transport's door,
before it holds anything more (HTTP before its body is read, gRPC before this lookup, its
message being whole when it arrives), so a memo hit is charged as any other request is, on both
transports: one of ``--max-requests-in-flight`` and its bytes, for as long as it is answered. A
request the memo does not answer where it was asked (below ASGI, on a gRPC thread) gives its
place back and is admitted again where it is answered, for as long as that holds it: a place
never crosses threads nor outlives the code that took it.

How an answer from the memo was made is the entry's own (``MemoEntry.status``): the hit status
of the in-process tier whose entry it was rendered from, which every transport reports for it
(``X-Cache``, gRPC's ``x-cache`` trailer, the trace), so the memo names no tier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import xxhash

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.cache.memo import MemoEntry, MemoKey, ResponseMemo
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.models.types import Model
from cachefleet.runtime.service.inference import InferAnswer, InferenceService, Renderer
from cachefleet.runtime.service.request_ledger import RequestLedger

Rendered = TypeVar("Rendered")
#: What the memo keeps of a rendered answer: the bytes to send, and the transport's headers for
#: them (None: it keeps none).
Kept = tuple[bytes, list[tuple[bytes, bytes]] | None]
#: Makes the key of a request that was not looked up, once its answer is to be kept.
KeyLater = Callable[[], MemoKey]

__all__ = ["Kept", "KeyLater", "MemoAnswers", "MemoEntry", "MemoKey"]


class MemoAnswers:
    """The runtime's answer memo, served (see the module); any thread."""

    def __init__(
        self, memo: ResponseMemo, ledger: RequestLedger, service: InferenceService
    ) -> None:
        self.memo = memo
        self._ledger = ledger
        self._service = service
        # The next two are the memo's own methods, bound once: a hit pays no wrapper's call.
        #: ``hasher(scope)``: a hasher for a request of ``scope``; feed it the body, piece by
        #: piece as it comes, and give its ``digest()`` to :attr:`key`.
        self.hasher: Callable[[bytes], xxhash.xxh3_128] = memo.hasher
        #: ``key(digest, scope, body)``: the key of a request of ``scope`` whose hasher gave
        #: ``digest``, ``body`` in its pieces (one, for an insert: a body in several is only
        #: looked up).
        self.key: Callable[[bytes, bytes, Sequence[bytes]], MemoKey] = memo.key
        #: ``key_of(scope, body)``: the key of a request of ``scope`` whose whole ``body`` is at
        #: hand (the memo's own method, bound once like the two above).
        self.key_of: Callable[[bytes, bytes], MemoKey] = memo.key_of
        # A hit's steps, bound once: a hit makes no closure and looks up no attribute chain.
        self._lookup = memo.lookup
        self._resolve = service.model
        self._memo_hit = ledger.memo_hit
        #: ``holds(model_name)``: whether the memo keeps an entry of the model a request names
        #: (as it names it); False, counted as the miss a lookup would be, when it keeps none:
        #: then neither hash nor look the request up, and give :meth:`memoizing` a way to make
        #: its key.
        self.holds: Callable[[str], bool] = memo.holds

    @staticmethod
    def applies(directives: CacheDirectives) -> bool:
        """Whether a request with ``directives`` may be answered from the memo (and kept in it):
        the one rule of both transports."""
        return directives.lookup

    def whole(self, key: MemoKey, body: bytes) -> MemoKey:
        """``key`` to keep an entry under, ``body`` being its request's body joined (the same
        key when the body came in one piece: a key is built once)."""
        return self.memo.whole(key, body)

    def hit(self, key: MemoKey, transport: str, started_ns: int) -> MemoEntry | None:
        """The memoized answer to ``key``'s request, written down in the ledger as a local hit
        of ``transport`` (``started_ns``: ``time.perf_counter_ns()`` when the request was in);
        None, nothing counted, when there is none or it is stale."""
        found = self._lookup(key)
        if found is None:
            return None
        # The memo keeps the model object (typed as an object in ``cache``, which knows no model).
        model: Model = found.model  # type: ignore[assignment]
        if self._memo_hit(model, transport, started_ns, self._confirmed, found, found.status):
            return found
        self.memo.delete(key)  # stale: its local entry or its model is gone
        return None

    def _confirmed(self, found: MemoEntry, started_ns: int) -> int | None:
        """``found`` still answers: the names its request gave resolve to the model object it
        was rendered for, and its local entry lives (counted as a local hit); the
        ``perf_counter_ns()`` it was confirmed at, else None."""
        try:
            model = self._resolve(found.name, found.version or None)
        except ServingError:
            return None  # the service's path refuses it, and counts the refusal
        return found.token.confirm(started_ns) if model is found.model else None

    def memoizing(
        self,
        key: MemoKey | KeyLater,
        model_name: str,
        version: str | None,
        render: Renderer[Rendered],
        keep: Callable[[Rendered], Kept],
    ) -> Renderer[Rendered]:
        """``render``, keeping its answer under ``key`` when the memo may (see the module):
        ``key`` made only then when it is a :data:`KeyLater` (a request that was not looked
        up, :attr:`holds`); ``model_name`` and ``version`` as the request named them, ``keep``
        what of the rendered answer the memo holds."""
        memo = self.memo
        named = version or ""

        def memoized(answer: InferAnswer) -> Rendered:
            rendered = render(answer)
            token = answer.local_entry
            if token is not None and answer.request.shareable:
                body, headers = keep(rendered)
                kept = key if isinstance(key, MemoKey) else key()
                entry = MemoEntry(
                    body, answer.model, token, model_name, named, answer.cache_status, headers
                )
                memo.insert(kept, entry)
            return rendered

        return memoized
