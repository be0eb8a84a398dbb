"""The entry format: round trips, and rejects anything that is not exactly what was stored."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cachefleet.runtime.cache.entry import EntryMac, encode_entry, read_entry
from cachefleet.runtime.cache.errors import CorruptEntryError, ForgedEntryError
from cachefleet.runtime.tensor import NUMPY_DTYPES, Tensor

DIGEST = bytes(range(32))
OUTPUTS = [
    Tensor.from_numpy("OUTPUT0", np.arange(16, dtype="<i4").reshape(1, 16)),
    Tensor.from_numpy("fc6_1", np.linspace(0, 1, 1000, dtype="<f4").reshape(1000, 1, 1)),
    Tensor.from_numpy("labels", np.array([b"cat", b"", "\u00e9t\u00e9"], dtype=object)),
    Tensor("empty", "FP32", (0, 3), b""),
]


def test_round_trip_keeps_names_types_shapes_and_bytes() -> None:
    assert read_entry(encode_entry(DIGEST, OUTPUTS), DIGEST).outputs == OUTPUTS


def test_round_trip_of_no_outputs() -> None:
    assert read_entry(encode_entry(DIGEST, []), DIGEST).outputs == []


def test_entry_of_another_request_is_rejected() -> None:
    blob = encode_entry(DIGEST, OUTPUTS)
    with pytest.raises(CorruptEntryError, match="different request"):
        read_entry(blob, bytes(32))


@pytest.mark.parametrize("cut", [0, 3, 10, 60, -33, -1])
def test_truncated_entries_are_rejected(cut: int) -> None:
    blob = encode_entry(DIGEST, OUTPUTS)
    with pytest.raises(CorruptEntryError):
        read_entry(blob[:cut], DIGEST)


def test_any_flipped_byte_is_detected() -> None:
    blob = encode_entry(DIGEST, OUTPUTS)
    for position in range(0, len(blob), 97):
        damaged = bytearray(blob)
        damaged[position] ^= 0x01
        with pytest.raises(CorruptEntryError):
            read_entry(bytes(damaged), DIGEST)


def test_foreign_bytes_are_rejected() -> None:
    for blob in (b"", b"hello", b"\x80\x04\x95" + bytes(200), b"CFE1" + bytes(100)):
        with pytest.raises(CorruptEntryError):
            read_entry(blob, DIGEST)


def test_other_format_version_is_rejected() -> None:
    blob = bytearray(encode_entry(DIGEST, OUTPUTS))
    struct.pack_into("<H", blob, 4, 2)
    with pytest.raises(CorruptEntryError, match="format"):
        read_entry(bytes(blob), DIGEST)


def test_expiry_travels_with_the_entry() -> None:
    stored = read_entry(encode_entry(DIGEST, OUTPUTS, expires_at=1_900_000_000.25), DIGEST)
    assert stored.expires_at == 1_900_000_000.25
    assert stored.outputs == OUTPUTS
    assert read_entry(encode_entry(DIGEST, OUTPUTS), DIGEST).expires_at is None


_DATATYPES = ["UINT8", "INT32", "FP32", "FP64", "BOOL"]


@st.composite
def tensors(draw: st.DrawFn) -> Tensor:
    datatype = draw(st.sampled_from(_DATATYPES))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=4)))
    count = int(np.prod(shape)) if shape else 1
    itemsize = np.dtype(NUMPY_DTYPES[datatype]).itemsize
    data = draw(st.binary(min_size=count * itemsize, max_size=count * itemsize))
    if datatype == "BOOL":
        data = bytes(b & 1 for b in data)
    name = draw(st.text(min_size=1, max_size=12))
    return Tensor(name, datatype, shape, data)


@settings(max_examples=200, deadline=None)
@given(st.lists(tensors(), max_size=4), st.binary(min_size=32, max_size=32))
def test_any_outputs_round_trip(outputs: list[Tensor], digest: bytes) -> None:
    assert read_entry(encode_entry(digest, outputs), digest).outputs == outputs


FLEET = EntryMac("the fleet's cache secret")


def test_a_sealed_entry_reads_back_only_with_its_secret() -> None:
    sealed = encode_entry(DIGEST, OUTPUTS, None, FLEET)
    assert read_entry(sealed, DIGEST, FLEET).outputs == OUTPUTS
    # Another secret, or none at all on the writer's side: forged.
    with pytest.raises(ForgedEntryError, match="MAC mismatch"):
        read_entry(encode_entry(DIGEST, OUTPUTS, None, EntryMac("another secret")), DIGEST, FLEET)
    with pytest.raises(ForgedEntryError, match="carries no MAC"):
        read_entry(encode_entry(DIGEST, OUTPUTS), DIGEST, FLEET)
    # A server without the secret cannot check a MAC, so it does not trust the entry.
    with pytest.raises(CorruptEntryError, match="has no secret") as refused:
        read_entry(sealed, DIGEST)
    assert not isinstance(refused.value, ForgedEntryError)


def test_any_flipped_byte_of_a_sealed_entry_is_forged_or_corrupt() -> None:
    sealed = encode_entry(DIGEST, OUTPUTS, None, FLEET)
    for index in range(len(sealed)):
        changed = bytearray(sealed)
        changed[index] ^= 0x01
        with pytest.raises(CorruptEntryError):
            read_entry(bytes(changed), DIGEST, FLEET)


def test_the_secret_never_shows_in_the_mac_object() -> None:
    mac = EntryMac("s3cret-s3cret-s3cret")
    assert "s3cret" not in repr(mac)
    assert not hasattr(mac, "secret")  # only the derived key is kept
