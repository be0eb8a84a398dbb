"""Checks of a request against the model's configuration, each with a message that says
exactly what is wrong and what the model expects.

This is the one validation layer: everything a request can get wrong is refused here, while it
is decoded and before the cache sees it. The model backend, the cache and the renderer trust
what passed, so a bad request never costs a cache lookup, a single-flight slot or a model run,
and a mistake found later is the server's own (a 500).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.models.types import ModelConfig, TensorSpec
from cachefleet.runtime.tensor import NUMPY_DTYPES, Tensor, decode_bytes_elements, element_count

#: Output datatypes Triton can rank for the classification extension.
CLASSIFIABLE = frozenset(
    {"UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64", "FP32", "FP64"}
)


def check_input(
    item: dict[str, Any], config: ModelConfig, seen: Sequence[Tensor]
) -> tuple[str, str, tuple[int, ...]]:
    """Name, datatype and shape of one JSON input, checked against the model."""
    name = item.get("name")
    if not isinstance(name, str):
        raise BadRequestError("each input needs a string 'name'")
    spec = config.input(name)
    if spec is None:
        expected = ", ".join(s.name for s in config.inputs)
        raise BadRequestError(
            f"unknown input {name!r} for model {config.name!r} (inputs: {expected})"
        )
    for tensor in seen:
        if tensor.name == name:
            raise BadRequestError(f"input {name!r} appears more than once")
    datatype = item.get("datatype")
    if datatype != spec.datatype:
        raise BadRequestError(
            f"input {name!r}: datatype {datatype!r} does not match the model's {spec.datatype}"
        )
    shape = _shape(name, item.get("shape"))
    _check_shape(name, shape, spec, config)
    _check_extent(name, datatype, shape)
    return name, datatype, shape


def check_binary_size(name: str, datatype: str, shape: tuple[int, ...], data: bytes) -> None:
    """The binary data of an input must hold exactly the elements its shape asks for."""
    count = element_count(shape)
    if datatype == "BYTES":
        try:
            elements = decode_bytes_elements(data, count, name)
        except ValueError as error:
            raise BadRequestError(f"input {name!r}: {error}") from None
        check_text(name, elements)
        return
    expected = count * NUMPY_DTYPES[datatype].itemsize
    if len(data) != expected:
        raise BadRequestError(
            f"input {name!r}: {datatype}{list(shape)} needs {expected} bytes, "
            f"binary_data_size is {len(data)}"
        )


def check_window_size(name: str, datatype: str, shape: tuple[int, ...], byte_size: int) -> None:
    """A shared-memory window must fit the input's shape before a byte of it is copied: exactly
    its size for fixed-size datatypes, room for every length prefix for BYTES (whose elements
    are then checked by :func:`check_binary_size`). A tiny tensor cannot make the server copy a
    large region."""
    count = element_count(shape)
    if datatype == "BYTES":
        if byte_size < 4 * count:
            raise BadRequestError(
                f"input {name!r}: BYTES{list(shape)} needs at least {4 * count} bytes, "
                f"shared_memory_byte_size is {byte_size}"
            )
        return
    expected = count * NUMPY_DTYPES[datatype].itemsize
    if byte_size != expected:
        raise BadRequestError(
            f"input {name!r}: {datatype}{list(shape)} needs {expected} bytes, "
            f"shared_memory_byte_size is {byte_size}"
        )


def check_text(name: str, elements: Sequence[bytes]) -> None:
    """BYTES elements must be UTF-8: ONNX Runtime, the one backend, takes string tensors as text.

    JSON strings always are; binary data is checked here, element by element (two halves of a
    character in neighbouring elements are valid together but not apart).
    """
    for element in elements:
        try:
            element.decode()
        except UnicodeDecodeError:
            raise BadRequestError(
                f"input {name!r}: BYTES elements must be UTF-8 for an ONNX string tensor"
            ) from None


def check_request_parameters(parameters: Mapping[str, Any]) -> None:
    """The scheduling parameters both transports share: ``priority`` (a level, 0 the default)
    and ``timeout`` (microseconds in the queue, 0 none), each a non-negative integer. Checked
    here, while decoding, so that a string or NaN sent over gRPC is a 400 there as over HTTP."""
    for name in ("priority", "timeout"):
        value = parameters.get(name, 0)
        if type(value) is not int or value < 0:
            raise BadRequestError(
                f"parameter {name!r} must be a non-negative integer, not {value!r}"
            )


def check_inputs_complete(tensors: Sequence[Tensor], config: ModelConfig) -> None:
    """Every required input is present, with one batch size across inputs."""
    names = {tensor.name for tensor in tensors}
    missing = [s.name for s in config.inputs if s.name not in names and not s.optional]
    if missing:
        raise BadRequestError(
            f"missing input {', '.join(repr(m) for m in missing)} for model {config.name!r}"
        )
    if config.max_batch_size > 0:
        batches = {tensor.shape[0] for tensor in tensors}
        if len(batches) > 1:
            raise BadRequestError(
                f"inputs of model {config.name!r} have different batch sizes: "
                + ", ".join(f"{t.name}={t.shape[0]}" for t in tensors)
            )


def check_output(name: Any, classification: int, config: ModelConfig) -> None:
    """A requested output must exist, and classification must suit its datatype."""
    if not isinstance(name, str):
        raise BadRequestError("each requested output needs a string 'name'")
    spec = config.output(name)
    if spec is None:
        expected = ", ".join(s.name for s in config.outputs)
        raise BadRequestError(
            f"unknown output {name!r} for model {config.name!r} (outputs: {expected})"
        )
    if classification < 0:
        raise BadRequestError(f"output {name!r}: classification must be positive")
    if classification and spec.datatype not in CLASSIFIABLE:
        raise BadRequestError(
            f"output {name!r}: classification is not available for datatype {spec.datatype}"
        )


def _shape(name: str, value: Any) -> tuple[int, ...]:
    if type(value) is list:
        for dim in value:
            if type(dim) is not int or dim < 0:
                break
        else:
            return tuple(value)
    raise BadRequestError(f"input {name!r}: 'shape' must be an array of non-negative integers")


#: The most bytes a shape may span (its non-zero dimensions times the item size): what an
#: array, and so the model backend, can describe at all.
_MAX_EXTENT_BYTES = 2**63 - 1
#: The size of a BYTES element as an array holds it (a reference).
_BYTES_ITEM_SIZE = 8


def _check_extent(name: str, datatype: str, shape: tuple[int, ...]) -> None:
    """A zero-element tensor holds no data, whatever its other dimensions say, so its size
    check passes; but a shape such as ``[0, 2**62]`` is still one no array can take. Refused
    here as the client's mistake, not left to fail in the backend (a 500)."""
    dtype = NUMPY_DTYPES.get(datatype)
    extent = dtype.itemsize if dtype is not None else _BYTES_ITEM_SIZE
    for dim in shape:
        extent *= dim or 1
    if extent > _MAX_EXTENT_BYTES:
        raise BadRequestError(
            f"input {name!r}: shape {list(shape)} is too large for a {datatype} tensor "
            "(its dimensions span more than 2^63 bytes, even with no elements)"
        )


def _check_shape(name: str, shape: tuple[int, ...], spec: TensorSpec, config: ModelConfig) -> None:
    expected = spec.shape(config.max_batch_size)
    matches = len(shape) == len(expected)
    if matches:
        for got, want in zip(shape, expected, strict=True):
            if want != -1 and got != want:
                matches = False
                break
    if not matches:
        raise BadRequestError(
            f"input {name!r}: shape {list(shape)} does not match the model's "
            f"{list(expected)} (-1 is any size)"
        )
    if config.max_batch_size > 0 and not 1 <= shape[0] <= config.max_batch_size:
        raise BadRequestError(
            f"input {name!r}: batch size {shape[0]} must be between 1 and "
            f"{config.max_batch_size} for model {config.name!r}"
        )
    if spec.reshape is not None:
        _check_reshape(name, shape, spec.reshape, batched=config.max_batch_size > 0)


def _check_reshape(
    name: str, shape: tuple[int, ...], reshape: tuple[int, ...], *, batched: bool
) -> None:
    """A model with a config ``reshape`` is fed the request's elements in the reshaped form, so
    their count (per batch row) must fit it: equal it, or divide by its fixed part when the
    reshape leaves one dimension free (-1)."""
    row = shape[1:] if batched else shape
    count = element_count(row)
    fixed = element_count(tuple(dim for dim in reshape if dim != -1))
    free = reshape.count(-1)
    fits = count == fixed if free == 0 else free == 1 and fixed > 0 and count % fixed == 0
    if not fits:
        raise BadRequestError(
            f"input {name!r}: shape {list(shape)} cannot be reshaped to the model's {list(reshape)}"
        )
