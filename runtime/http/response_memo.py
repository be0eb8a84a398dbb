"""A memo of fully rendered responses for byte-identical requests.

A repeated request (same model, same body bytes, same binary header length) is answered with
the exact response bytes rendered the last time, skipping decoding, the key and rendering.
It is safe by construction: everything that shapes a response (the request ``id``, the
selected outputs, JSON vs binary, classification, parameters) is in the body, so a request
that differs in any of them differs in its digest. ``Cache-Control`` directives bypass the
memo, and ``Accept-Encoding`` is applied after it.

The digest is over the model name and version as the request names them (the path's, before
they are resolved) and the body after them, so a transport can hash a body's chunks as they
arrive and never join them when the answer is memoized; the entry keeps the model object it
was rendered for, and a request is served from it only while its names resolve to that object.

A memoized response lives no longer than the local-tier entry it was rendered from: each
memo entry keeps that entry's liveness token (``cache.api.LocalEntryToken``), and is served
only while the token confirms the entry is still live, so a flush, an expiry, an eviction or a
replacement of the entry ends the memoized response with it. A reloaded model is a new model
object, which the memo entry also has to match. The memo is an LRU bounded by bytes, and used
only from the event loop's thread, so it needs no lock.

It holds nothing outside its count: the token names the local entry by key and a bare
identity (not the entry's tensors, which an eviction must free), and the model object is
shared with the repository while the model is loaded; unloading or reloading a model
discards its responses.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass

from blake3 import blake3

from cachefleet.runtime.cache.api import LocalEntryToken
from cachefleet.runtime.models.types import Model

#: Bytes charged per memo entry for the objects around the response bytes.
ENTRY_OVERHEAD_BYTES = 320
_PREFIX = b"cachefleet.memo2"
_LENGTHS = struct.Struct("<QQQ")


@dataclass(slots=True)
class Memoized:
    """One rendered response and what it was rendered from."""

    model: Model
    #: Confirms (and counts) a hit while the local entry it was rendered from lives.
    token: LocalEntryToken
    body: bytes
    header_length: int | None
    size: int
    #: The transport's response headers for it, built on first use and sent as they are.
    response_headers: list[tuple[bytes, bytes]] | None = None
    #: The same headers as HTTP/1.1 header lines, for the protocol's own answer (``memo_front``).
    header_lines: bytes | None = None


def digest_hasher(model: str, version: str | None, header_length: int | None) -> blake3:
    """A BLAKE3 hasher fed the request's fields; feed it the body (in any number of pieces)
    and take its 256-bit ``digest()``.

    The fields are length-prefixed, so they end where their lengths say and the body is
    everything after them: no two (fields, body) pairs hash the same stream. The header length
    goes in as decimal text ("" when absent): it is the client's number, any integer, and a
    refused request must be refused, not fail in here. No version ("latest") is "".
    """
    name = model.encode()
    named = b"" if version is None else version.encode()
    length = b"" if header_length is None else b"%d" % header_length
    sizes = _LENGTHS.pack(len(name), len(named), len(length))
    return blake3(_PREFIX + sizes + name + named + length)


class ResponseMemo:
    """Request digest -> rendered response, LRU, at most ``max_bytes`` of responses."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, Memoized] = OrderedDict()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes) -> Memoized | None:
        found = self._entries.get(digest)
        if found is not None:
            self._entries.move_to_end(digest)
        return found

    def put(
        self,
        digest: bytes,
        model: Model,
        token: LocalEntryToken,
        body: bytes,
        header_length: int | None,
    ) -> None:
        size = ENTRY_OVERHEAD_BYTES + len(body)
        if size > self.max_bytes:
            return
        self.discard(digest)
        while self._bytes + size > self.max_bytes:
            self.discard(next(iter(self._entries)))
        self._entries[digest] = Memoized(model, token, body, header_length, size)
        self._bytes += size

    def discard_model(self, name: str) -> None:
        """Forget every response of model ``name`` (unloaded or reloaded): an entry keeps its
        model object, which must not outlive the model's unload."""
        for digest in [d for d, found in self._entries.items() if found.model.name == name]:
            self.discard(digest)

    def discard(self, digest: bytes) -> None:
        gone = self._entries.pop(digest, None)
        if gone is not None:
            self._bytes -= gone.size
