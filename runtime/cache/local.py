"""The in-process tier: an LRU bounded by bytes, with per-entry TTLs (a ``tier.Tier``).

An ``OrderedDict`` gives O(1) lookup, recency update and eviction; one lock makes it safe
from any thread. It holds decoded tensors (immutable bytes), so a local hit costs a dict lookup
and no parsing. An entry's size is its tensor bytes plus a fixed per-entry allowance for the
Python objects around them, so the bound tracks real memory, not entry counts.

Entries are kept as plain tuples of strings, ints and bytes, and keyed by plain tuples
(model, version, digest), so that Python's cyclic garbage collector stops
tracking them: a full local tier holds hundreds of thousands of entries, and as tracked
objects (dataclasses) every full collection walked all of them, a pause of about 0.4 s per
collection with 256 MiB of small entries, taken by whichever request triggered it. Tensors are
rebuilt from the fields on a lookup.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.tier import Found, TierFigures
from cachefleet.runtime.tensor import Tensor

#: Bytes charged per entry and per tensor for the objects that hold them (measured roughly).
ENTRY_OVERHEAD_BYTES = 256
TENSOR_OVERHEAD_BYTES = 160


def entry_size(outputs: Sequence[Tensor]) -> int:
    """What an entry is charged against the bound."""
    return ENTRY_OVERHEAD_BYTES + sum(
        TENSOR_OVERHEAD_BYTES + len(t.name) + len(t.data) + 8 * len(t.shape) for t in outputs
    )


#: A tensor as plain fields: (name, datatype, shape, data).
_Fields = tuple[str, str, tuple[int, ...], bytes]
#: An entry: (tensors, size charged, monotonic expiry or inf, identity). A plain tuple, never
#: a class instance, so that the collector untracks it (see the module docstring). The identity
#: is a bare ``object()`` (untracked too): what :meth:`LocalTier.entry` hands out, so that who
#: keeps it (through a liveness token) keeps 16 bytes alive, not the entry's tensors.
_Slot = tuple[tuple[_Fields, ...], int, float, object]
#: A key as the tier keeps it: (model, version, digest).
_Key = tuple[str, str, bytes]


class LocalTier:
    """A byte-bounded, TTL-aware LRU of request keys to output tensors."""

    name = "local"
    #: In this process: looked up first, at once (``tier.Tier``).
    shared = False

    def __init__(
        self,
        max_bytes: int,
        on_size: Callable[[int], None] = lambda size: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_bytes = max_bytes
        self._on_size = on_size
        self._clock = clock
        self._slots: OrderedDict[_Key, _Slot] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._evictions = 0
        self._lock = threading.Lock()

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._slots)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def asks(self, key: CacheKey) -> bool:
        return True

    def lookup(self, key: CacheKey) -> Found | None:
        """The live entry's outputs and identity (see :meth:`entry`), marked as recently used;
        None when absent or expired."""
        slot = self._live(key)
        if slot is None:
            return None
        outputs, _, _, identity = slot
        return Found([Tensor.trusted(*fields) for fields in outputs], None, identity)

    def lookup_many(self, keys: Sequence[CacheKey]) -> list[Found | None]:
        return [self.lookup(key) for key in keys]

    def entry(self, key: CacheKey) -> object | None:
        """The live entry's identity for ``key``, an opaque object, marked as recently used;
        None when absent or expired. A put, an eviction, a flush or expiry ends that identity,
        so ``entry(key) is earlier`` says an earlier answer is still exactly what is cached.
        The identity holds none of the entry's data."""
        slot = self._live(key)
        return None if slot is None else slot[3]

    def _live(self, key: CacheKey) -> _Slot | None:
        plain = (key.model, key.version, key.digest)
        with self._lock:
            slot = self._slots.get(plain)
            if slot is None:
                self._misses += 1
                return None
            _, _, expires_at, _ = slot
            if expires_at <= self._clock():
                self._remove(plain)
                self._on_size(self._bytes)
                self._misses += 1
                return None
            self._slots.move_to_end(plain)
            self._hits += 1
            return slot

    def insert(self, key: CacheKey, value: Sequence[Tensor], ttl_s: float) -> bool:
        """Store an entry, evicting the least recently used; False if it can never fit."""
        outputs = value
        size = entry_size(outputs)
        if size > self.max_bytes:
            return False
        expires_at = self._clock() + ttl_s if ttl_s > 0 else float("inf")
        fields = tuple((t.name, t.datatype, t.shape, t.data) for t in outputs)
        plain = (key.model, key.version, key.digest)
        with self._lock:
            if plain in self._slots:
                self._remove(plain)
            while self._bytes + size > self.max_bytes:
                self._remove(next(iter(self._slots)))
                self._evictions += 1
            self._slots[plain] = (fields, size, expires_at, object())
            self._bytes += size
            self._on_size(self._bytes)
        return True

    def delete(self, key: CacheKey) -> None:
        plain = (key.model, key.version, key.digest)
        with self._lock:
            if plain in self._slots:
                self._remove(plain)
                self._on_size(self._bytes)

    def flush(self, model: str) -> int:
        """Drop every entry of ``model``; returns how many were dropped."""
        with self._lock:
            doomed = [plain for plain in self._slots if plain[0] == model]
            for key in doomed:
                self._remove(key)
            self._on_size(self._bytes)
        return len(doomed)

    def figures(self) -> TierFigures:
        with self._lock:
            return TierFigures(
                len(self._slots), self._bytes, self._hits, self._misses, self._evictions
            )

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()
            self._bytes = 0
            self._on_size(0)

    def _remove(self, plain: _Key) -> None:
        _, size, _, _ = self._slots.pop(plain)
        self._bytes -= size
