"""An upstream's output tensor in canonical form, from raw contents or typed ``contents``.

Triton and cachefleet answer in ``raw_output_contents``, which is the canonical byte form
already (little-endian, BYTES as length-prefixed elements): it is taken as it is, only checked
against its shape. A server that answers in the typed ``contents`` fields instead (the
protocol allows either) is converted once here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.tensor import NUMPY_DTYPES, Tensor, TensorDataError, encode_bytes_elements

#: The typed ``InferTensorContents`` field of each datatype (FP16 has none in the protocol).
_FIELDS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def output_tensor(output: Any, raw: bytes | None) -> Tensor:
    """The output ``output`` (an ``InferOutputTensor``) with its raw bytes, if any."""
    shape = tuple(int(dim) for dim in output.shape)
    try:
        if raw is None:
            raw = _typed_bytes(output)
        return Tensor(output.name, output.datatype, shape, raw)
    except TensorDataError as error:
        raise ModelExecutionError(
            f"the upstream's answer does not hold together: {error}"
        ) from None


def _typed_bytes(output: Any) -> bytes:
    field = _FIELDS.get(output.datatype)
    if field is None:
        raise TensorDataError(f"tensor {output.name!r}: no contents for {output.datatype}")
    values = list(getattr(output.contents, field))
    if output.datatype == "BYTES":
        return encode_bytes_elements(values)
    return bytes(np.asarray(values, dtype=NUMPY_DTYPES[output.datatype]).tobytes())
