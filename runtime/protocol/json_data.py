"""KServe v2 JSON tensor data to and from canonical tensor bytes.

JSON ``data`` may be flat or nested (row-major); only the element count must match the shape.
Numbers are checked against the datatype the way Triton checks them: no floats in integer
tensors, no values outside the datatype's range, strings only in ``BYTES``, booleans only in
``BOOL`` and nothing but booleans there (Triton reads each element with the JSON accessor of the
datatype, and ``true`` is no number to it; Python's ``True`` is an ``int``, so it is looked for).
"""

from __future__ import annotations

import array
import sys
from typing import Any

import numpy as np

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.tensor import (
    NUMPY_DTYPES,
    Tensor,
    decode_bytes_elements,
    element_count,
    encode_bytes_elements,
)

#: ``array`` typecodes of the datatypes with a fixed-size C type (little-endian after a swap).
_TYPECODES = {
    "INT8": "b", "UINT8": "B", "INT16": "h", "UINT16": "H", "INT32": "i", "UINT32": "I",
    "INT64": "q", "UINT64": "Q", "FP32": "f", "FP64": "d",
}  # fmt: skip
_BIG_ENDIAN = sys.byteorder == "big"
#: numpy kinds a JSON array may infer to, per target kind (b: bool, i/u: integer, f: float).
_ACCEPTED_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def tensor_from_json(name: str, datatype: str, shape: tuple[int, ...], data: Any) -> Tensor:
    """The tensor described by a JSON input; raises BadRequestError naming what is wrong."""
    if not isinstance(data, list):
        raise BadRequestError(f"input {name!r}: 'data' must be a JSON array")
    expected = element_count(shape)
    if datatype == "BYTES":
        elements = _flatten_strings(name, data)
        _check_count(name, shape, expected, len(elements))
        return Tensor(name, datatype, shape, encode_bytes_elements(elements))
    if datatype != "BOOL" and _holds_booleans(data):
        raise BadRequestError(
            f"input {name!r}: 'data' holds booleans, which {datatype} cannot hold"
        )
    packed = _packed(name, datatype, data)
    if packed is not None:
        _check_count(name, shape, expected, len(packed))
        return Tensor(name, datatype, shape, packed.tobytes())
    numbers = _numeric_array(name, datatype, data)
    _check_count(name, shape, expected, numbers.size)
    return Tensor(name, datatype, shape, numbers.tobytes())


def json_data(tensor: Tensor) -> Any:
    """The tensor's elements as a flat JSON-ready value (numpy arrays serialize via orjson).

    An output is the model's (or a checksummed cache entry's), not the client's: ONNX Runtime
    gives string tensors as text, so BYTES outputs are UTF-8, and a failure here is a server
    fault (500), never a bad request.
    """
    if tensor.datatype != "BYTES":
        return np.frombuffer(tensor.data, dtype=NUMPY_DTYPES[tensor.datatype])
    elements = decode_bytes_elements(tensor.data, element_count(tensor.shape), tensor.name)
    return [element.decode() for element in elements]


def _packed(name: str, datatype: str, data: list[Any]) -> array.array[Any] | None:
    """The fast path for the common case, a flat list of numbers: ``array`` packs it in one C
    loop and refuses floats in integer types and out-of-range values by itself. None (nested
    lists, strings, BOOL or FP16) leaves the case to numpy, which also explains refusals."""
    typecode = _TYPECODES.get(datatype)
    if typecode is None:
        return None
    try:
        packed = array.array(typecode, data)
    except TypeError:
        return None
    except OverflowError:
        raise BadRequestError(
            f"input {name!r}: 'data' holds values out of range for {datatype}"
        ) from None
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed


def _numeric_array(name: str, datatype: str, data: list[Any]) -> np.ndarray:
    """Convert once as inferred (so floats, booleans or strings are seen for what they are),
    check the kind and the integer range, then cast: one pass over large tensors."""
    dtype = NUMPY_DTYPES[datatype]
    try:
        array = np.array(data)
    except (ValueError, OverflowError):
        raise BadRequestError(
            f"input {name!r}: 'data' must be a flat or evenly nested array of numbers"
        ) from None
    if array.size == 0:
        return np.empty(0, dtype=dtype)
    kind = array.dtype.kind
    if kind not in _ACCEPTED_KINDS[dtype.kind]:
        raise BadRequestError(
            f"input {name!r}: 'data' holds {_describe_kind(kind)}, which {datatype} cannot hold"
        )
    if dtype.kind in "iu" and array.dtype != dtype:
        info = np.iinfo(dtype)  # type: ignore[type-var]
        if array.min() < info.min or array.max() > info.max:
            raise BadRequestError(
                f"input {name!r}: 'data' holds values out of range for {datatype}"
            )
    return array.astype(dtype, copy=False).ravel()


def _holds_booleans(data: list[Any]) -> bool:
    """Whether ``data`` (nested lists included) holds a JSON ``true`` or ``false``: one C-level
    pass of ``type`` over each list, as cheap as packing it."""
    lists = [data]
    while lists:
        items = lists.pop()
        types = set(map(type, items))
        if bool in types:
            return True
        if list in types:
            lists.extend(item for item in items if type(item) is list)
    return False


def _flatten_strings(name: str, data: list[Any]) -> list[object]:
    flat: list[object] = []
    stack: list[Any] = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            if not isinstance(item, str):
                raise BadRequestError(
                    f"input {name!r}: BYTES data in JSON must be strings, got {item!r}"
                )
            flat.append(item)
        else:
            stack.pop()
    return flat


def _check_count(name: str, shape: tuple[int, ...], expected: int, got: int) -> None:
    if got != expected:
        raise BadRequestError(
            f"input {name!r}: shape {list(shape)} needs {expected} elements, 'data' has {got}"
        )


def _describe_kind(kind: str) -> str:
    return {
        "b": "booleans",
        "i": "integers",
        "u": "integers",
        "f": "floating-point numbers",
        "U": "strings",
        "O": "mixed or oversized values",
    }.get(kind, "values")
