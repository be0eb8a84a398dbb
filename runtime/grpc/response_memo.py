"""A memo of encoded ``ModelInferResponse`` bytes for byte-identical ``ModelInfer`` requests.

The gRPC counterpart of the HTTP memo: everything that shapes a response (model, version, the
tensors, the request ``id``, the selected outputs, parameters) is in the request message, so a
repeat of the same request bytes is answered with the bytes encoded the last time, skipping
decoding, the key and encoding. An entry lives no longer than the local-tier entry it was
encoded from: it keeps that entry's liveness token and is served only while the token confirms
the entry (a flush, expiry, eviction or replacement ends it), and only while its model and
version still resolve to the model object it was encoded for (an unload or reload discards it).

Unlike the HTTP memo it is read from the gRPC server's threads and written from the event loop,
so one lock guards it; every operation under the lock is a dict operation, never I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from blake3 import blake3

from cachefleet.runtime.cache.api import LocalEntryToken
from cachefleet.runtime.models.types import Model

#: Bytes charged per memo entry for the objects around the response bytes.
ENTRY_OVERHEAD_BYTES = 320
_PREFIX = b"cachefleet.grpc-memo1"


def request_digest(message: bytes) -> bytes:
    """The memo's key for a serialized ``ModelInferRequest``."""
    return blake3(_PREFIX + message).digest()


@dataclass(frozen=True, slots=True)
class Memoized:
    """One encoded response and what it was encoded from."""

    #: The model and version as the request named them ("" for the latest).
    name: str
    version: str
    model: Model
    token: LocalEntryToken
    body: bytes
    size: int


class ResponseMemo:
    """Request digest -> encoded response, LRU, at most ``max_bytes`` of responses; any thread."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[bytes, Memoized] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, digest: bytes) -> Memoized | None:
        with self._lock:
            found = self._entries.get(digest)
            if found is not None:
                self._entries.move_to_end(digest)
            return found

    def put(
        self, digest: bytes, name: str, version: str, model: Model, token: LocalEntryToken,
        body: bytes,
    ) -> None:  # fmt: skip
        size = ENTRY_OVERHEAD_BYTES + len(body)
        if size > self.max_bytes:
            return
        with self._lock:
            self._discard(digest)
            while self._bytes + size > self.max_bytes:
                self._discard(next(iter(self._entries)))
            self._entries[digest] = Memoized(name, version, model, token, body, size)
            self._bytes += size

    def discard(self, digest: bytes) -> None:
        with self._lock:
            self._discard(digest)

    def discard_model(self, name: str) -> None:
        """Forget every response of model ``name`` (unloaded or reloaded)."""
        with self._lock:
            for digest in [d for d, found in self._entries.items() if found.model.name == name]:
                self._discard(digest)

    def _discard(self, digest: bytes) -> None:
        gone = self._entries.pop(digest, None)
        if gone is not None:
            self._bytes -= gone.size
