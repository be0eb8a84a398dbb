"""The cache key: stable, canonical, and sensitive to everything that changes the answer."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pytest
from blake3 import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from cachefleet.runtime.cache.key import (
    KEY_FORMAT_VERSION,
    CacheKey,
    KeySpace,
    compute_key,
)
from cachefleet.runtime.tensor import Tensor

INPUT0 = Tensor.from_numpy("INPUT0", np.arange(16, dtype="<i4").reshape(1, 16))
INPUT1 = Tensor.from_numpy("INPUT1", np.ones((1, 16), dtype="<i4"))
#: A model fingerprint (hex BLAKE3, as the repository makes them).
FINGERPRINT = blake3(b"simple files").hexdigest()
#: Golden vector: ``simple`` v1 on the files of FINGERPRINT, with INPUT0 = 0..15 and INPUT1 =
#: ones, no parameters. If this changes, every cache in every fleet goes cold: bump
#: KEY_FORMAT_VERSION on purpose instead.
GOLDEN_HEX = "0d84aa73954ff036981fa4c5ac568539fc6effe851885c4a4f8726faaa508bd6"


def key(inputs: list[Tensor], parameters: dict[str, Any] | None = None, **kw: str) -> CacheKey:
    return compute_key(
        kw.get("model", "simple"),
        kw.get("version", "1"),
        kw.get("fingerprint", FINGERPRINT),
        inputs,
        parameters or {},
    )


def test_golden_vector_is_stable_across_releases_and_replicas() -> None:
    result = key([INPUT0, INPUT1])
    assert result.hexdigest == GOLDEN_HEX
    assert KeySpace().redis_key(result) == f"cachefleet:v2:default:simple:{GOLDEN_HEX}"
    assert (
        KeySpace("ml/fleet-a").redis_key(result) == f"cachefleet:v2:ml/fleet-a:simple:{GOLDEN_HEX}"
    )


def test_key_is_blake3_over_the_documented_length_prefixed_encoding() -> None:
    def field(value: bytes) -> bytes:
        return struct.pack("<Q", len(value)) + value

    encoded = b"cachefleet.key" + struct.pack("<I", KEY_FORMAT_VERSION)
    encoded += field(b"simple") + field(b"1") + field(FINGERPRINT.encode()) + struct.pack("<Q", 2)
    for tensor in (INPUT0, INPUT1):
        encoded += field(tensor.name.encode()) + field(tensor.datatype.encode())
        encoded += struct.pack("<Q", 2) + struct.pack("<QQ", 1, 16) + field(tensor.data)
    encoded += field(b"{}")
    assert blake3(encoded).hexdigest() == GOLDEN_HEX


def reference_key(model: str, version: str, inputs: list[Tensor], params: bytes) -> str:
    """The documented encoding, written out naively."""

    def field(value: bytes) -> bytes:
        return struct.pack("<Q", len(value)) + value

    encoded = b"cachefleet.key" + struct.pack("<I", KEY_FORMAT_VERSION)
    encoded += field(model.encode()) + field(version.encode()) + field(FINGERPRINT.encode())
    encoded += struct.pack("<Q", len(inputs))
    for tensor in sorted(inputs, key=lambda t: t.name):
        encoded += field(tensor.name.encode()) + field(tensor.datatype.encode())
        encoded += struct.pack("<Q", len(tensor.shape))
        encoded += b"".join(struct.pack("<Q", dim) for dim in tensor.shape)
        encoded += field(tensor.data)
    return blake3(encoded + field(params)).hexdigest()


def test_large_and_small_inputs_follow_the_documented_encoding() -> None:
    image = Tensor.from_numpy("data_0", np.random.default_rng(1).random((3, 224, 224), "<f4"))
    mask = Tensor.from_numpy("mask", np.ones((2, 3), dtype=np.uint8))
    inputs = [mask, image, INPUT0]
    expected = reference_key("densenet_onnx", "3", inputs, b'{"a":1}')
    got = compute_key(
        "densenet_onnx", "3", FINGERPRINT, inputs, {"a": 1, "binary_data_output": True}
    )
    assert got.hexdigest == expected


def test_same_bytes_with_another_shape_never_share_a_key() -> None:
    data = np.arange(4, dtype="<f4").tobytes()
    square = Tensor("x", "FP32", (2, 2), data)
    flat = Tensor("x", "FP32", (4,), data)
    assert key([square]) != key([flat])


def test_same_bytes_with_another_datatype_never_share_a_key() -> None:
    data = np.arange(4, dtype="<i4").tobytes()
    assert key([Tensor("x", "INT32", (4,), data)]) != key([Tensor("x", "FP32", (4,), data)])


def test_model_version_and_fingerprint_are_part_of_the_key() -> None:
    base = key([INPUT0])
    assert key([INPUT0], model="other") != base
    assert key([INPUT0], version="2") != base
    # The same name and version over other files (a rollout, another fleet): another key.
    assert key([INPUT0], fingerprint=blake3(b"other files").hexdigest()) != base


def test_names_cannot_run_into_each_other() -> None:
    # Without length prefixes "ab"+"c" and "a"+"bc" would hash the same stream.
    one = compute_key("ab", "c", FINGERPRINT, [INPUT0], {})
    two = compute_key("a", "bc", FINGERPRINT, [INPUT0], {})
    assert one != two


def test_input_order_does_not_matter_but_input_names_do() -> None:
    assert key([INPUT0, INPUT1]) == key([INPUT1, INPUT0])
    renamed = Tensor("INPUT2", INPUT1.datatype, INPUT1.shape, INPUT1.data)
    assert key([INPUT0, INPUT1]) != key([INPUT0, renamed])


def test_equal_tensors_give_equal_keys_whatever_their_origin() -> None:
    from_numpy = Tensor.from_numpy("INPUT0", np.arange(16, dtype=np.int32).reshape(1, 16))
    from_bytes = Tensor("INPUT0", "INT32", (1, 16), bytes(INPUT0.data))
    assert key([from_numpy]) == key([from_bytes])


def test_bytes_tensors_are_keyed_by_their_elements() -> None:
    one = Tensor.from_numpy("t", np.array([b"ab", b"c"], dtype=object))
    two = Tensor.from_numpy("t", np.array([b"a", b"bc"], dtype=object))
    assert key([one]) != key([two])
    assert key([one]) == key([Tensor.from_numpy("t", np.array(["ab", "c"], dtype=object))])


def test_parameters_that_change_the_answer_are_keyed() -> None:
    assert key([INPUT0], {"temperature": 0.5}) != key([INPUT0], {"temperature": 0.7})
    assert key([INPUT0], {"temperature": 0.5}) != key([INPUT0])
    assert key([INPUT0], {"a": 1, "b": {"y": 2, "x": 1}}) == key(
        [INPUT0], {"b": {"x": 1, "y": 2}, "a": 1}
    )


@pytest.mark.parametrize(
    "parameter",
    [{"binary_data_output": True}, {"cache": False}, {"priority": 3}, {"timeout": 1000}],
)
def test_presentation_parameters_are_not_keyed(parameter: dict[str, Any]) -> None:
    assert key([INPUT0], parameter) == key([INPUT0])


def test_flush_pattern_escapes_glob_characters_in_model_names() -> None:
    keys = KeySpace("team-a/fleet")
    assert keys.model_pattern("simple") == "cachefleet:v2:team-a/fleet:simple:*"
    assert keys.model_pattern("a*b?[c]") == "cachefleet:v2:team-a/fleet:a\\*b\\?\\[c\\]:*"


def test_a_namespace_holds_only_its_own_models_keys() -> None:
    keys, other = KeySpace("a"), KeySpace("b")
    entry = key([INPUT0], model="x:y")
    assert keys.holds(keys.redis_key(entry).encode(), "x:y")
    assert not keys.holds(keys.redis_key(entry).encode(), "y")  # model "y" never takes "x:y"
    assert not keys.holds(other.redis_key(entry).encode(), "x:y")
    assert keys.flush_channel == "cachefleet:v2:a:flush" != other.flush_channel


@pytest.mark.parametrize("namespace", ["", "a:b", "a{b}", "a*", "-a", "a b", "x" * 321])
def test_namespaces_that_would_make_ambiguous_keys_are_refused(namespace: str) -> None:
    with pytest.raises(ValueError, match="namespace"):
        KeySpace(namespace)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=3),
    st.lists(st.integers(0, 3), max_size=3),
    st.sampled_from(["UINT8", "INT8"]),
    st.sampled_from(["UINT8", "INT8"]),
)
def test_different_datatypes_or_shapes_never_share_a_key(
    shape_a: list[int], shape_b: list[int], type_a: str, type_b: str
) -> None:
    count_a = int(np.prod(shape_a)) if shape_a else 1
    count_b = int(np.prod(shape_b)) if shape_b else 1
    a = Tensor("x", type_a, tuple(shape_a), bytes(count_a))
    b = Tensor("x", type_b, tuple(shape_b), bytes(count_b))
    same = (a.datatype, a.shape) == (b.datatype, b.shape)
    assert (key([a]) == key([b])) == same


def test_keys_are_equal_by_every_field_and_hash_by_their_digest() -> None:
    """Equal keys hash alike (they are dict keys in every tier); the hash is the digest's,
    which bytes objects cache, but equality still compares the model and version too."""
    digest = bytes(range(32))
    key = CacheKey("m", "1", digest)
    same = CacheKey("m", "1", bytes(digest))
    assert key == same
    assert hash(key) == hash(same) == hash(digest)
    assert {key: 1}[same] == 1
    assert key != CacheKey("n", "1", digest)
    assert key != CacheKey("m", "2", digest)
    assert key != CacheKey("m", "1", bytes(32))
