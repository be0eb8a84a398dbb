"""The one tensor type that crosses every runtime layer.

A :class:`Tensor` holds its bytes in canonical form: little-endian, C order, and for ``BYTES``
each element as a 4-byte little-endian length followed by its bytes (the encoding of Triton's
binary tensor extension). The protocol decodes JSON and binary requests into it, the cache keys
and stores it as is, and the model backend converts it to and from numpy at the edge. One form
means the JSON and binary encodings of the same tensor are the same bytes, and so the same key.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

#: KServe v2 datatype -> numpy dtype (little-endian). BYTES has no fixed-size dtype.
NUMPY_DTYPES: dict[str, np.dtype[np.generic]] = {
    "BOOL": np.dtype("bool"),
    "UINT8": np.dtype("<u1"),
    "UINT16": np.dtype("<u2"),
    "UINT32": np.dtype("<u4"),
    "UINT64": np.dtype("<u8"),
    "INT8": np.dtype("<i1"),
    "INT16": np.dtype("<i2"),
    "INT32": np.dtype("<i4"),
    "INT64": np.dtype("<i8"),
    "FP16": np.dtype("<f2"),
    "FP32": np.dtype("<f4"),
    "FP64": np.dtype("<f8"),
}
DATATYPES: frozenset[str] = frozenset(NUMPY_DTYPES) | {"BYTES"}
_LENGTH = struct.Struct("<I")


class TensorDataError(ValueError):
    """Bytes that do not match the tensor's datatype and shape."""


def element_count(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count


def datatype_of(array: np.ndarray) -> str:
    """The KServe v2 datatype of a numpy array (object and string arrays are BYTES)."""
    if array.dtype.kind in "OSU":
        return "BYTES"
    for name, dtype in NUMPY_DTYPES.items():
        if array.dtype.newbyteorder("<") == dtype:
            return name
    raise TensorDataError(f"no KServe datatype for numpy dtype {array.dtype}")


#: How ``Tensor.trusted`` fills a frozen instance.
_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class Tensor:
    """A named tensor in canonical byte form (see the module docstring)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: bytes

    def __post_init__(self) -> None:
        if self.datatype not in DATATYPES:
            raise TensorDataError(f"tensor {self.name!r}: unknown datatype {self.datatype!r}")
        if any(dim < 0 for dim in self.shape):
            raise TensorDataError(f"tensor {self.name!r}: negative dimension in {self.shape}")
        if self.datatype != "BYTES":
            expected = element_count(self.shape) * NUMPY_DTYPES[self.datatype].itemsize
            if len(self.data) != expected:
                raise TensorDataError(
                    f"tensor {self.name!r}: {self.datatype}{list(self.shape)} needs "
                    f"{expected} bytes, got {len(self.data)}"
                )

    @classmethod
    def trusted(cls, name: str, datatype: str, shape: tuple[int, ...], data: bytes) -> Tensor:
        """A tensor from fields that were a valid Tensor before (a cache tier keeps them as plain
        tuples): built without checking them again."""
        tensor = object.__new__(cls)
        _set(tensor, "name", name)
        _set(tensor, "datatype", datatype)
        _set(tensor, "shape", shape)
        _set(tensor, "data", data)
        return tensor

    @classmethod
    def from_numpy(cls, name: str, array: np.ndarray, datatype: str | None = None) -> Tensor:
        datatype = datatype or datatype_of(array)
        shape = tuple(int(dim) for dim in array.shape)
        if datatype == "BYTES":
            return cls(name, datatype, shape, encode_bytes_elements(array.ravel().tolist()))
        data = np.ascontiguousarray(array, dtype=NUMPY_DTYPES[datatype]).tobytes()
        return cls(name, datatype, shape, data)

    def to_numpy(self) -> np.ndarray:
        """A numpy view of the data (read-only for numeric types; object array for BYTES)."""
        if self.datatype == "BYTES":
            elements = decode_bytes_elements(self.data, element_count(self.shape), self.name)
            array = np.empty(len(elements), dtype=object)
            array[:] = elements
            return array.reshape(self.shape)
        return np.frombuffer(self.data, dtype=NUMPY_DTYPES[self.datatype]).reshape(self.shape)

    @property
    def nbytes(self) -> int:
        return len(self.data)


def encode_bytes_elements(elements: list[object]) -> bytes:
    """Serialize BYTES elements as length-prefixed byte strings (str is UTF-8 encoded)."""
    parts: list[bytes] = []
    for element in elements:
        raw = element.encode() if isinstance(element, str) else bytes(element)  # type: ignore[call-overload]
        parts.append(_LENGTH.pack(len(raw)))
        parts.append(raw)
    return b"".join(parts)


def decode_bytes_elements(data: bytes, count: int, name: str = "") -> list[bytes]:
    """Split length-prefixed BYTES data into exactly ``count`` elements, or raise."""
    elements: list[bytes] = []
    offset, view = 0, memoryview(data)
    while offset < len(data):
        if offset + 4 > len(data):
            raise TensorDataError(f"tensor {name!r}: truncated BYTES length prefix")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > len(data):
            raise TensorDataError(f"tensor {name!r}: BYTES element runs past the data")
        elements.append(bytes(view[offset : offset + length]))
        offset += length
    if len(elements) != count:
        raise TensorDataError(
            f"tensor {name!r}: shape needs {count} BYTES elements, got {len(elements)}"
        )
    return elements
