"""The answer memo: the cache tier in front of the others, holding rendered answers by the raw
request bytes they answer.

Why it is kept like a tier: like the local tier it maps a key to an answer, is bounded by bytes
and evicts the least recently used, and it is ``tier.Kept`` (flush, figures), so the cache's
flush empties it with the other tiers and its figures are exported with theirs
(``tier_metrics``); it is also forgotten when a model is unloaded or loaded again. It is not a
``tier.Tier``: its key is the request's bytes, not the cache key, so no tier walk reads it.
Unlike the tiers it keeps answers as a transport sent them (bytes the transport rendered), so a
byte-identical repeat skips decoding, the cache key and rendering. It knows no transport: the
service layer serves it (``service.memo_answers``), and a transport only frames its request (a
*scope*: its domain and whatever besides the body shapes the answer, as bytes) and hands over
the body.

Why it is safe:

- An entry answers one request exactly: it keeps the request (its scope and its body) and a
  lookup returns it only to a request equal to it, byte for byte. The digest (:class:`MemoKey`)
  only finds the candidate: it is a fast hash (xxHash's XXH3, 128 bits, under a seed each memo
  draws at random), not a cryptographic one, because it never decides; the comparison does.
  Everything that shapes an answer (the request ``id``, the selected outputs, JSON vs binary,
  classification, parameters, the tensors; what a transport carries outside the body, in its
  scope) is in those bytes, so requests that would be answered differently never
  share an entry, and each transport's scope starts with its own domain, so neither transport
  answers the other's.
- An entry lives no longer than the local-tier entry it was rendered from: it keeps that
  entry's liveness token (``cache.api.LocalEntryToken``) and is served only while the token
  confirms it (a flush, an expiry, an eviction or a replacement ends it), so only a
  ``local`` or ``tiered`` cache has a memo (``Runtime.memo`` is None otherwise).
- An entry keeps the model object it was rendered for, and is served only while the names the
  request gives still resolve to that object; a reload is a new object, and an unload or a
  reload forgets the model's entries (:meth:`ResponseMemo.forget_model`), so no entry keeps a
  model alive.

Why not BLAKE3 (the response cache's key): the memo sits in front of every repeated request,
and BLAKE3 over a 600 KB image body took 110-130 microseconds of a hit's 500; XXH3 takes 14,
and the comparison (a ``memcmp``) 16.

What an entry is charged: what it keeps alive, object by object (:func:`entry_footprint`): its
slot in the LRU (the ordered dict's table and link, table growth included: :data:`SLOT_BYTES`),
the digest, the entry, the answer's bytes, the request it keeps (a tuple of its scope and its
body, the scope counted though a transport may share it between entries), the answer's headers
and the liveness token, each at ``sys.getsizeof``. A flat 320 bytes per entry once stood for
all but the bytes, and small entries held 1.6-2.4 times what they were charged (75.7 MiB for
32 MiB with 40-byte answers).

Which models it holds entries of is kept beside the entries (:meth:`ResponseMemo.holds`): a
request of a model with no entry cannot be answered here, so a transport skips its digest and
its lookup (a small miss spent about as much on them as on the model) and counts it as the miss
the lookup would have been. A model whose answers are not kept (cache admission skips its local
tier, so it has no local hits) or whose requests never repeat thus pays no memo per request.

It is read from a transport's threads and from the event loop, so one lock guards it; every
operation under the lock is dict work, never I/O, and no call waits for anything but the lock.
"""

from __future__ import annotations

import secrets
import sys
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import xxhash

from cachefleet.runtime.cache.api import CacheStatus, LocalEntryToken
from cachefleet.runtime.cache.tier import TierFigures

#: A request as an entry keeps it: its scope (see the module) and its body, whole.
KeptRequest = tuple[bytes, bytes]


class MemoPieces:
    """A request whose body came in several pieces, as a lookup compares it with a kept
    :data:`KeptRequest`: equal when the scopes are and the pieces are the kept body's bytes,
    compared where they lie, so a 600 KB body is not joined (copied) to be looked up. A body in
    one piece needs none of this: its request is the plain tuple, compared in C."""

    __slots__ = ("pieces", "scope")

    def __init__(self, scope: bytes, pieces: Sequence[bytes]) -> None:
        self.scope = scope
        self.pieces = pieces

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, tuple) or other[0] != self.scope:
            return False
        whole, offset = other[1], 0
        for piece in self.pieces:
            if not whole.startswith(piece, offset):  # a memcmp in place, no slice
                return False
            offset += len(piece)
        return offset == len(whole)

    __hash__ = None  # type: ignore[assignment]  # compared, never a dict key


#: A request as looked up: as kept, or a body still in its pieces.
MemoRequest = KeptRequest | MemoPieces


class MemoKey(NamedTuple):
    """A request as the memo looks it up: the digest that finds an entry, and the request the
    entry must equal (see the module)."""

    digest: bytes
    request: MemoRequest


@dataclass(slots=True)
class MemoEntry:
    """One rendered answer and what it was rendered from."""

    #: The answer as the transport sends it.
    body: bytes
    #: The model object it was rendered for, compared by identity only: served only while the
    #: request's names resolve to that very object.
    model: object
    #: Confirms (and counts as a local hit) a hit while the local entry it came from lives.
    token: LocalEntryToken
    #: The model's name and its version as the request named them ("" for the latest).
    name: str
    version: str
    #: How the cache answered the request it was rendered for: the hit status of the
    #: in-process tier whose entry the token confirms, which every hit of it reports.
    status: CacheStatus
    #: The transport's own header bytes for it (name, value pairs), if it keeps any.
    headers: list[tuple[bytes, bytes]] | None = None
    #: The request it answers, set when the memo keeps it.
    request: KeptRequest = (b"", b"")
    #: Bytes it is charged against the bound (:func:`entry_footprint`), set when kept.
    charged: int = 0


def _slot_bytes() -> int:
    """The most one entry costs an ordered dict (its table share and its link), measured on
    one filled to 8192 entries right after each growth of its table, where a slot costs most."""
    table: OrderedDict[int, None] = OrderedDict()
    empty = sys.getsizeof(table)
    most = 0.0
    previous = empty
    for count in range(1, 8193):
        table[count] = None
        size = sys.getsizeof(table)
        if size != previous and count >= 64:  # it grew: the dearest point per entry
            most = max(most, (size - empty) / count)
        previous = size
    return int(most) + 1


#: What one entry's slot costs the memo's ordered dict (see :func:`_slot_bytes`).
SLOT_BYTES = _slot_bytes()


def _held(*objects: object) -> int:
    return sum(sys.getsizeof(item) for item in objects)


def entry_footprint(digest: bytes, entry: MemoEntry) -> int:
    """The bytes ``entry`` under ``digest`` keeps alive (see the module): what it is charged.
    The model object is shared with the server and not counted; the header names are the
    transport's constants."""
    request = entry.request
    kept = _held(request, *request)
    headers = entry.headers
    if headers:
        kept += sys.getsizeof(headers) + sum(_held(pair, pair[1]) for pair in headers)
    return (
        SLOT_BYTES
        + _held(digest, entry, entry.body, entry.name, entry.version)
        + entry.token.held_bytes()
        + kept
    )


class ResponseMemo:
    """Request -> rendered answer (found by digest, decided by the request), LRU, at most
    ``max_bytes`` of entries and the requests they answer; any thread."""

    name = "memo"

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, MemoEntry] = OrderedDict()
        #: How many entries each model (by the name its requests gave) has here.
        self._models: dict[str, int] = {}
        self._bytes = 0
        self._hits = 0
        self._misses = 0
        self._evictions = 0
        self._lock = threading.Lock()
        #: The digests' seed, drawn per memo: nobody outside can aim two requests at one digest.
        self._seed = secrets.randbits(64)

    def hasher(self, scope: bytes) -> xxhash.xxh3_128:
        """A hasher for a request of ``scope`` (see the module), fed the scope already: feed it
        the body (in any number of pieces, never joined) and take its ``digest()`` for
        :meth:`key`."""
        return xxhash.xxh3_128(scope, self._seed)

    @staticmethod
    def key(digest: bytes, scope: bytes, body: Sequence[bytes]) -> MemoKey:
        """The key of a request of ``scope`` whose hasher gave ``digest``; ``body`` in its
        pieces (one, to keep an entry: a body in several is only looked up)."""
        if len(body) == 1:
            return MemoKey(digest, (scope, body[0]))
        return MemoKey(digest, MemoPieces(scope, body))

    @staticmethod
    def whole(key: MemoKey, body: bytes) -> MemoKey:
        """``key`` as an entry keeps it, ``body`` being its request's body joined: the same
        key when it came in one piece, else its digest and scope with the whole body."""
        request = key.request
        if isinstance(request, MemoPieces):
            return MemoKey(key.digest, (request.scope, body))
        return key

    def key_of(self, scope: bytes, body: bytes) -> MemoKey:
        """The key of a request of ``scope`` whose whole ``body`` is at hand."""
        hasher = xxhash.xxh3_128(scope, self._seed)
        hasher.update(body)
        return MemoKey(hasher.digest(), (scope, body))

    def __len__(self) -> int:
        return len(self._entries)

    def holds(self, model: str) -> bool:
        """Whether an entry of model ``model`` (the name its requests give) is kept, so a
        lookup of its request may find one; False, counted as the miss that lookup would be,
        when none is. Read without the lock (one dict lookup): an entry kept by another
        thread a moment after is missed once, as a lookup a moment before it would miss."""
        if model in self._models:
            return True
        with self._lock:
            self._misses += 1
        return False

    def lookup(self, key: MemoKey) -> MemoEntry | None:
        """The entry that answers ``key``'s request (now the most recently used), counted as a
        hit; None, counted as a miss. The caller still checks it (model object, token): one
        that fails is given back with :meth:`delete`."""
        with self._lock:
            found = self._entries.get(key.digest)
            if found is None or found.request != key.request:  # the latter: another request
                self._misses += 1
                return None
            self._entries.move_to_end(key.digest)
            self._hits += 1
            return found

    def insert(self, key: MemoKey, value: MemoEntry, ttl_s: float = 0) -> bool:
        """Keep ``value`` as the answer to ``key``'s request (replacing what its digest held),
        evicting the least recently used entries to make room; an answer larger than the bound
        is not kept. ``ttl_s`` is not needed: an entry lives no longer than its local entry
        (its token)."""
        assert not isinstance(key.request, MemoPieces), "an entry keeps its body whole"
        value.request = key.request
        size = value.charged = entry_footprint(key.digest, value)
        if size > self.max_bytes:
            return False
        with self._lock:
            self._remove(key.digest)
            while self._bytes + size > self.max_bytes:
                self._remove(next(iter(self._entries)))
                self._evictions += 1
            self._entries[key.digest] = value
            self._bytes += size
            models = self._models
            models[value.name] = models.get(value.name, 0) + 1
        return True

    def delete(self, key: MemoKey) -> None:
        """Drop the entry :meth:`lookup` found for ``key`` because it is stale (its local
        entry or its model is gone): the lookup counts as a miss, not a hit."""
        with self._lock:
            found = self._entries.get(key.digest)
            if found is not None and found.request == key.request and self._remove(key.digest):
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

    def figures(self) -> TierFigures:
        with self._lock:
            return TierFigures(
                len(self._entries), self._bytes, self._hits, self._misses, self._evictions
            )

    def _remove(self, digest: bytes) -> bool:
        gone = self._entries.pop(digest, None)
        if gone is None:
            return False
        self._bytes -= gone.charged
        models, name = self._models, gone.name
        left = models[name] - 1
        if left:
            models[name] = left
        else:
            del models[name]
        return True
