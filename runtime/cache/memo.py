"""The answer memo: the cache tier in front of the others, holding rendered answers by the raw
request bytes they answer.

Why it is a tier: like the local tier it maps a key to an answer, is bounded by bytes and
evicts the least recently used, is flushed with a model's entries and forgotten when the model
is unloaded or loaded again, and is counted (:meth:`ResponseMemo.figures`). Unlike the other
tiers it keeps answers as a transport sent them (the HTTP body, the encoded
``ModelInferResponse``), so a byte-identical repeat skips decoding, the cache key and rendering.

Why it is safe:

- Everything that shapes an answer (the request ``id``, the selected outputs, JSON vs binary,
  classification, parameters, the tensors) is in the request bytes, and the digest is over all
  of them, so requests that would be answered differently never share an entry. Each transport
  hashes under a prefix of its own (:func:`http_hasher`, :func:`grpc_digest`): an HTTP answer is
  never served to a gRPC request, or back.
- An entry lives no longer than the local-tier entry it was rendered from: it keeps that
  entry's liveness token (``cache.api.LocalEntryToken``) and is served only while the token
  confirms it (a flush, an expiry, an eviction or a replacement ends it), so only a
  ``local`` or ``tiered`` cache has a memo (``Runtime.memo`` is None otherwise).
- An entry keeps the model object it was rendered for, and is served only while the names the
  request gives still resolve to that object; a reload is a new object, and an unload or a
  reload forgets the model's entries (:meth:`ResponseMemo.forget_model`), so no entry keeps a
  model alive.

It is read from gRPC's threads and from the event loop, so one lock guards it; every operation
under the lock is dict work, never I/O, and no call waits for anything but the lock.
"""

from __future__ import annotations

import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

from blake3 import blake3

from cachefleet.runtime.cache.api import LocalEntryToken

#: Bytes charged per entry for the objects around the answer bytes.
ENTRY_OVERHEAD_BYTES = 320
#: Each transport's domain: the first bytes of everything it hashes.
_HTTP_PREFIX = b"cachefleet.memo.http1"
_GRPC_PREFIX = b"cachefleet.memo.grpc1"
_LENGTHS = struct.Struct("<QQQ")


def http_hasher(model: str, version: str | None, header_length: int | None) -> blake3:
    """A hasher for an HTTP infer request, fed its path's names and binary header length;
    feed it the body (in any number of pieces, never joined) and take its 32-byte ``digest()``.

    The fields are length-prefixed, so they end where their lengths say and the body is
    everything after them: no two (fields, body) pairs hash the same stream. The names are the
    path's, before they are resolved (no version, "latest", is ""). The header length goes in as
    decimal text ("" when absent): it is the client's number, any integer."""
    name = model.encode()
    named = b"" if version is None else version.encode()
    length = b"" if header_length is None else b"%d" % header_length
    sizes = _LENGTHS.pack(len(name), len(named), len(length))
    return blake3(_HTTP_PREFIX + sizes + name + named + length)


def grpc_digest(message: bytes) -> bytes:
    """The digest of a serialized ``ModelInferRequest`` (it names the model and version)."""
    return blake3(_GRPC_PREFIX + message).digest()


@dataclass(slots=True)
class MemoEntry:
    """One rendered answer and what it was rendered from."""

    #: The answer as the transport sends it (the HTTP body; the encoded gRPC response).
    body: bytes
    #: The model object it was rendered for, compared by identity only: served only while the
    #: request's names resolve to that very object.
    model: object
    #: Confirms (and counts as a local hit) a hit while the local entry it came from lives.
    token: LocalEntryToken
    #: The model's name and its version as the request named them ("" for the latest).
    name: str
    version: str
    #: Bytes charged for it against the bound.
    size: int
    #: The transport's own header bytes for it (HTTP: the response headers), made on first use.
    headers: list[tuple[bytes, bytes]] | None = None


class MemoFigures(NamedTuple):
    """What the memo holds and how it has done, for the metrics."""

    entries: int
    bytes: int
    hits: int
    misses: int
    evictions: int


class ResponseMemo:
    """Request digest -> rendered answer, LRU, at most ``max_bytes`` of entries; any thread."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, MemoEntry] = OrderedDict()
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes) -> MemoEntry | None:
        """The entry under ``digest`` (now the most recently used), counted as a hit; None,
        counted as a miss. The caller still checks it (model object, token): one that fails is
        given back with :meth:`discard`."""
        with self._lock:
            found = self._entries.get(digest)
            if found is None:
                self._misses += 1
                return None
            self._entries.move_to_end(digest)
            self._hits += 1
            return found

    def put(
        self, digest: bytes, body: bytes, model: object, token: LocalEntryToken, name: str,
        version: str, headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:  # fmt: skip
        """Keep ``body`` under ``digest`` (replacing what was there), evicting the least
        recently used entries to make room; an answer larger than the bound is not kept."""
        size = ENTRY_OVERHEAD_BYTES + len(body)
        if size > self.max_bytes:
            return
        entry = MemoEntry(body, model, token, name, version, size, headers)
        with self._lock:
            self._remove(digest)
            while self._bytes + size > self.max_bytes:
                self._remove(next(iter(self._entries)))
                self._evictions += 1
            self._entries[digest] = entry
            self._bytes += size

    def discard(self, digest: bytes) -> None:
        """Drop the entry :meth:`get` found under ``digest`` because it is stale (its local
        entry or its model is gone): the lookup counts as a miss, not a hit."""
        with self._lock:
            if self._remove(digest):
                self._hits -= 1
                self._misses += 1

    def forget_model(self, name: str) -> None:
        """Forget every entry of model ``name`` (unloaded or loaded again): an entry keeps its
        model object, which must not outlive the model's unload."""
        self.flush(name)

    def flush(self, model: str) -> int:
        """Remove every entry of ``model`` (the cache flush); how many were removed."""
        with self._lock:
            gone = [d for d, found in self._entries.items() if found.name == model]
            for digest in gone:
                self._remove(digest)
            return len(gone)

    def figures(self) -> MemoFigures:
        with self._lock:
            return MemoFigures(
                len(self._entries), self._bytes, self._hits, self._misses, self._evictions
            )

    def _remove(self, digest: bytes) -> bool:
        gone = self._entries.pop(digest, None)
        if gone is None:
            return False
        self._bytes -= gone.size
        return True
