"""An upstream's output tensor in canonical form, from raw contents or typed ``contents``.

Triton and cachefleet answer in ``raw_output_contents`` (gRPC) or binary data (HTTP, when
asked), which is the canonical byte form already (little-endian, BYTES as length-prefixed
elements): it is taken as it is, only checked against its shape. A server that answers in the
typed ``contents`` fields or in JSON ``data`` instead (the protocol allows either) is converted
once here.
"""

from __future__ import annotations

from collections.abc import Mapping
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
    """The output ``output`` (a gRPC ``InferOutputTensor``) with its raw bytes, if any."""
    shape = tuple(int(dim) for dim in output.shape)
    try:
        if raw is None:
            raw = _typed_bytes(output)
        return Tensor(output.name, output.datatype, shape, raw)
    except TensorDataError as error:
        raise _incoherent(error) from None


def output_bytes_tensor(output: Mapping[str, Any], raw: bytes) -> Tensor:
    """An HTTP answer's output (its JSON description) with its binary data."""
    try:
        return Tensor(output["name"], output["datatype"], _shape(output), raw)
    except (TensorDataError, KeyError, TypeError, ValueError) as error:
        raise _incoherent(error) from None


def json_output_tensor(output: Mapping[str, Any]) -> Tensor:
    """An HTTP answer's output given as JSON ``data``."""
    try:
        datatype, data = output["datatype"], output.get("data", [])
        flat = np.asarray(data, dtype=object).ravel().tolist() if data else []
        if datatype == "BYTES":
            raw = encode_bytes_elements(flat)
        else:
            raw = bytes(np.asarray(flat, dtype=NUMPY_DTYPES[datatype]).tobytes())
        return Tensor(output["name"], datatype, _shape(output), raw)
    except (TensorDataError, KeyError, TypeError, ValueError) as error:
        raise _incoherent(error) from None


def _shape(output: Mapping[str, Any]) -> tuple[int, ...]:
    return tuple(int(dim) for dim in output["shape"])


def _incoherent(error: Exception) -> ModelExecutionError:
    return ModelExecutionError(f"the upstream's answer does not hold together: {error}")


def _typed_bytes(output: Any) -> bytes:
    field = _FIELDS.get(output.datatype)
    if field is None:
        raise TensorDataError(f"tensor {output.name!r}: no contents for {output.datatype}")
    values = list(getattr(output.contents, field))
    if output.datatype == "BYTES":
        return encode_bytes_elements(values)
    return bytes(np.asarray(values, dtype=NUMPY_DTYPES[output.datatype]).tobytes())
