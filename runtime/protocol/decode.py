"""Decode a KServe v2 inference request body (JSON, or Triton's binary tensor extension).

With the binary extension the body is a JSON header of ``Inference-Header-Content-Length`` bytes
followed by the raw bytes of every input that carries ``parameters.binary_data_size``, in input
order. Raw bytes are already canonical (little-endian; BYTES as 4-byte length-prefixed
elements), so a binary input and the same input written as JSON decode to equal tensors.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol.json_data import tensor_from_json
from cachefleet.runtime.protocol.request import (
    InferRequest,
    RequestedOutput,
    SharedMemoryReader,
    SharedMemoryRef,
)
from cachefleet.runtime.protocol.validate import (
    check_binary_size,
    check_input,
    check_inputs_complete,
    check_output,
    check_request_parameters,
    check_window_size,
)
from cachefleet.runtime.tensor import Tensor

#: Request parameters are flat in KServe v2; nesting is tolerated up to this depth.
_MAX_PARAMETER_DEPTH = 32
SHARED_MEMORY_PARAMETERS = frozenset(
    {"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"}
)


def decode_request(
    body: bytes,
    header_length: int | None,
    config: ModelConfig,
    shared_memory: SharedMemoryReader | None = None,
) -> InferRequest:
    """Parse and validate ``body`` for the model ``config``; raises BadRequestError.

    Inputs that name a shared-memory region are read through ``shared_memory`` (refused when
    it is None) and checked like binary data, so they give the same tensors and cache keys.
    """
    header, binary = _split(body, header_length)
    document = _parse_json(header)
    parameters = _mapping(document.get("parameters"), "request 'parameters'")
    if parameters:
        _check_depth(parameters, "request 'parameters'")
    binary_output = parameters.get("binary_data_output", False)
    if not isinstance(binary_output, bool):
        raise BadRequestError("request parameter 'binary_data_output' must be true or false")
    check_request_parameters(parameters)
    inputs, reads_shared_memory = _decode_inputs(
        document.get("inputs"), binary, config, shared_memory
    )
    outputs = tuple(_decode_output(item, config) for item in _array(document, "outputs"))
    return InferRequest(
        id=_request_id(document.get("id")),
        inputs=inputs,
        outputs=outputs,
        parameters=parameters,
        binary_output=binary_output,
        reads_shared_memory=reads_shared_memory,
    )


def _split(body: bytes, header_length: int | None) -> tuple[bytes, memoryview]:
    if header_length is None:
        return body, memoryview(b"")
    if header_length < 0 or header_length > len(body):
        raise BadRequestError(
            f"Inference-Header-Content-Length is {header_length}, "
            f"but the body has {len(body)} bytes"
        )
    view = memoryview(body)
    return bytes(view[:header_length]), view[header_length:]


def _parse_json(header: bytes) -> dict[str, Any]:
    try:
        document = orjson.loads(header)
    except orjson.JSONDecodeError as error:
        raise BadRequestError(f"malformed JSON in the request body: {error}") from None
    if not isinstance(document, dict):
        raise BadRequestError("the request body must be a JSON object")
    return document


def _decode_inputs(
    items: Any,
    binary: memoryview,
    config: ModelConfig,
    shared_memory: SharedMemoryReader | None,
) -> tuple[tuple[Tensor, ...], bool]:
    """The input tensors, and whether one was read from shared memory."""
    if not isinstance(items, list) or not items:
        raise BadRequestError("the request needs a non-empty 'inputs' array")
    tensors: list[Tensor] = []
    offset = 0
    reads_shared_memory = False
    for item in items:
        if not isinstance(item, dict):
            raise BadRequestError("each entry of 'inputs' must be a JSON object")
        name, datatype, shape = check_input(item, config, tensors)
        parameters = _mapping(item.get("parameters"), f"input {name!r} 'parameters'")
        if not SHARED_MEMORY_PARAMETERS.isdisjoint(parameters):
            if shared_memory is None:
                raise BadRequestError(f"input {name!r}: shared memory is not supported here")
            if "data" in item or "binary_data_size" in parameters:
                raise BadRequestError(
                    f"input {name!r} names a shared memory region and also carries data"
                )
            window = shared_memory_ref(parameters, f"input {name!r}")
            check_window_size(name, datatype, shape, window.byte_size)
            data = shared_memory.read(window.region, window.offset, window.byte_size)
            check_binary_size(name, datatype, shape, data)
            tensors.append(Tensor(name, datatype, shape, data))
            reads_shared_memory = True
            continue
        size = parameters.get("binary_data_size")
        if size is None:
            if "data" not in item:
                raise BadRequestError(
                    f"input {name!r} has neither 'data' nor parameters.binary_data_size"
                )
            tensors.append(tensor_from_json(name, datatype, shape, item["data"]))
            continue
        if "data" in item:
            raise BadRequestError(f"input {name!r} has both 'data' and binary_data_size")
        data = _take(binary, offset, size, name)
        offset += len(data)
        check_binary_size(name, datatype, shape, data)
        tensors.append(Tensor(name, datatype, shape, data))
    if offset != len(binary):
        raise BadRequestError(
            f"the body has {len(binary) - offset} bytes after the binary data of the inputs "
            "(binary_data_size values do not add up to the body)"
        )
    check_inputs_complete(tensors, config)
    return tuple(tensors), reads_shared_memory


def _take(binary: memoryview, offset: int, size: Any, name: str) -> bytes:
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise BadRequestError(f"input {name!r}: binary_data_size must be a non-negative integer")
    if offset + size > len(binary):
        raise BadRequestError(
            f"input {name!r}: binary_data_size is {size}, but only "
            f"{len(binary) - offset} bytes of binary data are left (truncated body?)"
        )
    return bytes(binary[offset : offset + size])


def _decode_output(item: Any, config: ModelConfig) -> RequestedOutput:
    if not isinstance(item, dict):
        raise BadRequestError("each entry of 'outputs' must be a JSON object")
    name = item.get("name")
    parameters = _mapping(item.get("parameters"), f"output {name!r} 'parameters'")
    window = (
        None
        if SHARED_MEMORY_PARAMETERS.isdisjoint(parameters)
        else shared_memory_ref(parameters, f"output {name!r}")
    )
    binary = parameters.get("binary_data")
    if binary is not None and not isinstance(binary, bool):
        raise BadRequestError(f"output {name!r}: binary_data must be true or false")
    classification = parameters.get("classification", 0)
    if not isinstance(classification, int) or isinstance(classification, bool):
        raise BadRequestError(f"output {name!r}: classification must be an integer")
    check_output(name, classification, config)
    assert isinstance(name, str)  # check_output ensured it
    if window is not None and classification:
        raise BadRequestError(
            f"output {name!r}: classification into shared memory is not supported"
        )
    return RequestedOutput(name, binary, classification, window)


def shared_memory_ref(parameters: Mapping[str, Any], what: str) -> SharedMemoryRef:
    """The ``shared_memory_region`` / ``_byte_size`` / ``_offset`` parameters, checked."""
    region = parameters.get("shared_memory_region")
    if not isinstance(region, str) or not region:
        raise BadRequestError(f"{what}: shared_memory_region must name a registered region")
    values = []
    for key, default in (("shared_memory_byte_size", None), ("shared_memory_offset", 0)):
        value = parameters.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise BadRequestError(f"{what}: {key} must be a non-negative integer")
        values.append(value)
    return SharedMemoryRef(region, byte_size=values[0], offset=values[1])


def _request_id(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise BadRequestError("request 'id' must be a string")


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadRequestError(f"{what} must be a JSON object")
    return value


def _check_depth(value: Any, what: str) -> None:
    """Refuse parameters nested past :data:`_MAX_PARAMETER_DEPTH`: they enter the cache key,
    whose JSON encoder stops at 255 levels, and no real parameter comes close."""
    level: list[Any] = [value]
    for _ in range(_MAX_PARAMETER_DEPTH):
        level = [
            child
            for item in level
            if isinstance(item, dict | list)
            for child in (item.values() if isinstance(item, dict) else item)
        ]
        if not level:
            return
    raise BadRequestError(f"{what} are nested more than {_MAX_PARAMETER_DEPTH} levels deep")


def _array(document: Mapping[str, Any], key: str) -> list[Any]:
    value = document.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequestError(f"request {key!r} must be a JSON array")
    return value
