"""Typed ``InferTensorContents`` to canonical tensor bytes.

A gRPC input carries its elements either as bytes in ``raw_input_contents`` (what
``tritonclient.grpc`` sends, already canonical) or in the typed field that fits its datatype,
the way Triton reads them: INT8/16/32 in ``int_contents``, UINT8/16/32 in ``uint_contents``,
64-bit integers, floats, BOOL and BYTES in their own fields, FP16 and BF16 only as raw bytes.
Narrow integers travel widened, so their range is checked here, as Triton does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.protocol.validate import check_text
from cachefleet.runtime.tensor import NUMPY_DTYPES, element_count, encode_bytes_elements

#: The typed contents field for each datatype (FP16 has none: raw bytes only).
FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents", "INT16": "int_contents", "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents", "UINT16": "uint_contents", "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents", "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}  # fmt: skip
_NARROW = frozenset({"INT8", "INT16", "UINT8", "UINT16"})


def has_contents(contents: Any) -> bool:
    """Whether any typed field holds elements (an empty message means 'no typed data')."""
    return bool(contents.ListFields())


def tensor_bytes(name: str, datatype: str, shape: tuple[int, ...], contents: Any) -> bytes:
    """The canonical bytes of an input given in typed contents; raises BadRequestError."""
    field = FIELDS.get(datatype)
    if field is None:
        raise BadRequestError(
            f"input {name!r}: {datatype} has no typed contents field; send raw_input_contents"
        )
    for descriptor, _ in contents.ListFields():
        if descriptor.name != field:
            raise BadRequestError(
                f"input {name!r}: {datatype} data belongs in contents.{field}, "
                f"not contents.{descriptor.name}"
            )
    values = getattr(contents, field)
    expected = element_count(shape)
    if len(values) != expected:
        raise BadRequestError(
            f"input {name!r}: shape {list(shape)} needs {expected} elements, "
            f"contents.{field} has {len(values)}"
        )
    if datatype == "BYTES":
        elements = list(values)
        check_text(name, elements)  # as binary BYTES over HTTP: ONNX Runtime takes text
        return encode_bytes_elements(elements)
    dtype = NUMPY_DTYPES[datatype]
    if datatype not in _NARROW:
        return np.asarray(values, dtype=dtype).tobytes()
    wide = np.asarray(values, dtype=np.int64)
    info = np.iinfo(dtype)  # type: ignore[type-var]
    if wide.size and (wide.min() < info.min or wide.max() > info.max):
        raise BadRequestError(
            f"input {name!r}: contents.{field} holds values out of range for {datatype}"
        )
    return wide.astype(dtype).tobytes()
