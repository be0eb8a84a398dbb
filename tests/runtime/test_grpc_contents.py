"""Typed gRPC tensor contents become the same canonical bytes as numpy's, for every datatype
that has a typed field; narrow integers are range-checked; FP16 needs raw bytes."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.grpc import service_pb2

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.grpc.contents import tensor_bytes
from cachefleet.runtime.tensor import NUMPY_DTYPES, encode_bytes_elements

CASES = {
    "BOOL": ("bool_contents", [True, False, True, True]),
    "INT8": ("int_contents", [-128, -1, 0, 127]),
    "INT16": ("int_contents", [-32768, -2, 5, 32767]),
    "INT32": ("int_contents", [-(2**31), -3, 7, 2**31 - 1]),
    "INT64": ("int64_contents", [-(2**63), -4, 9, 2**63 - 1]),
    "UINT8": ("uint_contents", [0, 1, 200, 255]),
    "UINT16": ("uint_contents", [0, 2, 40000, 65535]),
    "UINT32": ("uint_contents", [0, 3, 2**31, 2**32 - 1]),
    "UINT64": ("uint64_contents", [0, 4, 2**63, 2**64 - 1]),
    "FP32": ("fp32_contents", [-1.5, 0.0, 0.25, 3.0e38]),
    "FP64": ("fp64_contents", [-1.5, 0.0, 1e-300, 1.7e308]),
}


@pytest.mark.parametrize("datatype", sorted(CASES))
def test_typed_contents_equal_numpy_bytes(datatype: str) -> None:
    field, values = CASES[datatype]
    contents = service_pb2.InferTensorContents(**{field: values})
    expected = np.array(values, dtype=NUMPY_DTYPES[datatype]).reshape(2, 2).tobytes()
    assert tensor_bytes("x", datatype, (2, 2), contents) == expected


def test_bytes_contents_are_length_prefixed() -> None:
    contents = service_pb2.InferTensorContents(bytes_contents=[b"ab", b"", b"\x00"])
    assert tensor_bytes("x", "BYTES", (3,), contents) == encode_bytes_elements(
        [b"ab", b"", b"\x00"]
    )


@pytest.mark.parametrize(
    ("datatype", "field", "values"),
    [("INT8", "int_contents", [128]), ("INT16", "int_contents", [-32769]),
     ("UINT8", "uint_contents", [256]), ("UINT16", "uint_contents", [65536])],
)  # fmt: skip
def test_narrow_integers_out_of_range(datatype: str, field: str, values: list[int]) -> None:
    contents = service_pb2.InferTensorContents(**{field: values})
    with pytest.raises(BadRequestError, match=f"out of range for {datatype}"):
        tensor_bytes("x", datatype, (1,), contents)


def test_fp16_has_no_typed_field() -> None:
    with pytest.raises(BadRequestError, match="FP16 has no typed contents field"):
        tensor_bytes("x", "FP16", (1,), service_pb2.InferTensorContents())
