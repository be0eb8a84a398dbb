"""The stored form of a cached answer: a versioned, self-checking binary entry. Never pickle.

Layout (all integers little-endian)::

    magic "CFE1" | format u16 | flags u16 | key digest 32B | expires at u64
    | header length u32 | header | payload | checksum 32B  (BLAKE3 of everything before it)

    flags: bit 0 set when the checksum is a MAC, BLAKE3 keyed with the fleet's secret.

    expires at = Unix time in milliseconds when the entry stops being valid, 0 for never; a
    replica that copies a Redis hit into its local tier keeps it only that long.

    header = count u32, then per output: name (u16 length + UTF-8), datatype (u8 length +
             ASCII), ndim u8, dims u64 x ndim, payload offset u64, payload length u64

The digest ties the entry to the exact request it answers, so even a Redis key collision, a
truncated write or a foreign value planted at our key is detected and treated as a miss.

The digest can be computed by anyone who sees a request, and an unkeyed checksum by anyone, so
without a secret whoever can write to the Redis can plant answers. With a secret
(:class:`EntryMac`), the checksum is a keyed BLAKE3 MAC: an entry written without the secret
(no MAC, or a MAC that fails) is a :class:`ForgedEntryError`. A server without a secret cannot
check a MAC, so it takes keyed entries as corrupt rather than trust them unchecked.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from blake3 import blake3

from cachefleet.runtime.cache.errors import CorruptEntryError, ForgedEntryError
from cachefleet.runtime.tensor import Tensor, TensorDataError

MAGIC = b"CFE1"
FORMAT_VERSION = 1
DIGEST_SIZE = 32
_PREAMBLE = struct.Struct("<4sHH32sQI")
_U8, _U16, _U32, _U64 = (struct.Struct(f) for f in ("<B", "<H", "<I", "<Q"))
_OFFSET_LENGTH = struct.Struct("<QQ")
_KEYED = 0x0001
#: The BLAKE3 key-derivation context of the MAC key (a fixed, unique string, as BLAKE3 asks).
_MAC_CONTEXT = "cachefleet 2026-11 response cache entry MAC v1"


class EntryMac:
    """The fleet secret's MAC key, derived once (the secret itself is not kept)."""

    __slots__ = ("_key",)

    def __init__(self, secret: str) -> None:
        self._key = blake3(secret.encode(), derive_key_context=_MAC_CONTEXT).digest()

    def hasher(self) -> blake3:
        return blake3(key=self._key)

    def __repr__(self) -> str:
        return "EntryMac(<secret>)"


@dataclass(frozen=True, slots=True)
class StoredEntry:
    outputs: list[Tensor]
    #: Unix time (seconds) when the entry expires; None for never.
    expires_at: float | None


def encode_entry(
    digest: bytes,
    outputs: Sequence[Tensor],
    expires_at: float | None = None,
    mac: EntryMac | None = None,
) -> bytes:
    """Serialize ``outputs`` as the answer to the request whose key digest is ``digest``,
    sealed with ``mac`` when the fleet has a secret."""
    header = bytearray(_U32.pack(len(outputs)))
    offset = 0
    for tensor in outputs:
        name, datatype = tensor.name.encode(), tensor.datatype.encode()
        header += _U16.pack(len(name)) + name + _U8.pack(len(datatype)) + datatype
        header += _U8.pack(len(tensor.shape))
        header += b"".join(_U64.pack(dim) for dim in tensor.shape)
        header += _OFFSET_LENGTH.pack(offset, len(tensor.data))
        offset += len(tensor.data)
    expires_ms = 0 if expires_at is None else max(1, int(expires_at * 1000))
    flags = 0 if mac is None else _KEYED
    preamble = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, flags, digest, expires_ms, len(header))
    hasher = blake3() if mac is None else mac.hasher()
    hasher.update(preamble)
    hasher.update(header)
    for tensor in outputs:
        hasher.update(tensor.data)
    return b"".join([preamble, header, *(t.data for t in outputs), hasher.digest()])


def read_entry(blob: bytes, digest: bytes, mac: EntryMac | None = None) -> StoredEntry:
    """The outputs and expiry stored in ``blob``, or :class:`CorruptEntryError` if anything is
    off (format, key digest, checksum, lengths), :class:`ForgedEntryError` if ``mac`` is given
    and the entry is not sealed with it."""
    try:
        return _decode(memoryview(blob), digest, mac)
    except (struct.error, UnicodeDecodeError, TensorDataError, IndexError) as error:
        raise CorruptEntryError(f"malformed cache entry: {error}") from None


def _decode(view: memoryview, digest: bytes, mac: EntryMac | None) -> StoredEntry:
    if len(view) < _PREAMBLE.size + DIGEST_SIZE:
        raise CorruptEntryError(f"cache entry too short ({len(view)} bytes)")
    preamble = _PREAMBLE.unpack_from(view, 0)
    magic, version, flags, stored_digest, expires_ms, header_length = preamble
    if magic != MAGIC or version != FORMAT_VERSION:
        raise CorruptEntryError(f"not a cache entry of format {FORMAT_VERSION}")
    if stored_digest != digest:
        raise CorruptEntryError("cache entry belongs to a different request")
    body_end = len(view) - DIGEST_SIZE
    _check_seal(view, body_end, flags, mac)
    header_end = _PREAMBLE.size + header_length
    if header_end > body_end:
        raise CorruptEntryError("cache entry header runs past the entry")
    outputs = _outputs(view, _PREAMBLE.size, header_end, body_end)
    return StoredEntry(outputs, expires_ms / 1000 if expires_ms else None)


def _check_seal(view: memoryview, body_end: int, flags: int, mac: EntryMac | None) -> None:
    keyed = bool(flags & _KEYED)
    if mac is not None and not keyed:
        raise ForgedEntryError("cache entry carries no MAC, and this fleet requires one")
    if mac is None and keyed:
        raise CorruptEntryError("cache entry carries a MAC, and this server has no secret")
    hasher = blake3() if mac is None else mac.hasher()
    hasher.update(view[:body_end])
    if hasher.digest() != view[body_end:]:
        if mac is not None:
            raise ForgedEntryError("cache entry MAC mismatch: not written with this secret")
        raise CorruptEntryError("cache entry checksum mismatch")


def _outputs(view: memoryview, position: int, payload_start: int, end: int) -> list[Tensor]:
    (count,) = _U32.unpack_from(view, position)
    position += _U32.size
    outputs: list[Tensor] = []
    for _ in range(count):
        (name_length,) = _U16.unpack_from(view, position)
        name = bytes(view[position + 2 : position + 2 + name_length]).decode()
        position += 2 + name_length
        (type_length,) = _U8.unpack_from(view, position)
        datatype = bytes(view[position + 1 : position + 1 + type_length]).decode("ascii")
        position += 1 + type_length
        (ndim,) = _U8.unpack_from(view, position)
        shape = struct.unpack_from(f"<{ndim}Q", view, position + 1)
        position += 1 + 8 * ndim
        offset, length = _OFFSET_LENGTH.unpack_from(view, position)
        position += _OFFSET_LENGTH.size
        start = payload_start + offset
        if start + length > end:
            raise CorruptEntryError(f"cache entry output {name!r} runs past the payload")
        outputs.append(Tensor(name, datatype, tuple(shape), bytes(view[start : start + length])))
    if position != payload_start:
        raise CorruptEntryError("cache entry header length does not match its contents")
    return outputs
