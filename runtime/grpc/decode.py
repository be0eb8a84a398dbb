"""Decode a ``ModelInferRequest`` into the same :class:`InferRequest` the HTTP side builds.

Inputs are checked by the protocol's own validators (name, datatype, shape, byte size), so a
request is refused over gRPC exactly when it would be over HTTP, with the same message. The
request parameters are read into plain values, so that the same parameters sent over either
transport reach the cache key equal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.grpc.contents import has_contents, tensor_bytes
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol.decode import SHARED_MEMORY_PARAMETERS, shared_memory_ref
from cachefleet.runtime.protocol.request import InferRequest, RequestedOutput, SharedMemoryReader
from cachefleet.runtime.protocol.validate import (
    check_binary_size,
    check_input,
    check_inputs_complete,
    check_output,
    check_request_parameters,
    check_window_size,
)
from cachefleet.runtime.tensor import Tensor


def decode_infer_request(
    message: Any, config: ModelConfig, shared_memory: SharedMemoryReader
) -> InferRequest:
    """Parse and validate ``message`` for the model ``config``; raises BadRequestError.
    Inputs that name a shared-memory region are read through ``shared_memory``."""
    values = parameters(message.parameters)
    check_request_parameters(values)
    return InferRequest(
        id=message.id or None,
        inputs=_inputs(message, config, shared_memory),
        outputs=tuple(_output(item, config) for item in message.outputs),
        parameters=values,
        # gRPC answers always carry raw_output_contents; there is no JSON rendering to choose.
        binary_output=True,
        # Every input that names a region was read from it (``_inputs`` refuses the others).
        reads_shared_memory=any(_REGION in item.parameters for item in message.inputs),
    )


_REGION = "shared_memory_region"
#: Bytes a typed element may take while decoded (a Python object and its pointer, for BYTES).
TYPED_ELEMENT_BYTES = 40
#: Copies of a message's bytes a request holds while it is decoded: the serialized message
#: (as grpcio hands it over, inflated when it came compressed), the parsed message (protobuf
#: copies its bytes fields), and the tensors (each ``raw_input_contents`` entry read out of the
#: parsed message is a copy of its own). Measured by the process's resident memory around
#: ``FromString`` and the reads, 200 MiB of raw contents: +200 MiB each.
MESSAGE_COPIES = 3


def message_cost(size: int) -> int:
    """What a serialized ``ModelInferRequest`` of ``size`` bytes holds while it is parsed and
    decoded (its typed contents aside: :func:`typed_cost`), charged before it is parsed."""
    return MESSAGE_COPIES * size


def typed_cost(message: Any) -> int:
    """What ``message``'s typed contents add while decoded: the objects they go through."""
    typed = 0
    for item in message.inputs:
        for _, values in item.contents.ListFields():
            typed += len(values)
    return TYPED_ELEMENT_BYTES * typed


def request_cost(message: Any) -> int:
    """What decoding a parsed ``message`` may hold, for the request budget: the message's bytes
    in their copies, and the objects typed contents go through (``ByteSize`` is cheap for raw
    bytes)."""
    size: int = message.ByteSize()
    return message_cost(size) + typed_cost(message)


def parameters(entries: Mapping[str, Any]) -> dict[str, Any]:
    """``map<string, InferParameter>`` as plain values (bool, int, str or float).

    A NaN or infinite ``double_param`` is refused: JSON cannot carry one, so HTTP never sees it,
    and the cache key's JSON encoding would write it as ``null``, the same as another value."""
    values: dict[str, Any] = {}
    for key, parameter in entries.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is not None:
            value = getattr(parameter, choice)
            if isinstance(value, float) and not math.isfinite(value):
                raise BadRequestError(f"parameter {key!r} must be a finite number, not {value}")
            values[key] = value
    return values


def _inputs(
    message: Any, config: ModelConfig, shared_memory: SharedMemoryReader
) -> tuple[Tensor, ...]:
    """Each input from, in this order: a shared-memory region it names, the next entry of
    ``raw_input_contents`` (which holds one entry per input not in shared memory, as
    tritonclient sends it), or its typed contents."""
    if not message.inputs:
        raise BadRequestError("the request needs at least one input")
    raw = message.raw_input_contents
    tensors: list[Tensor] = []
    used = 0
    for item in message.inputs:
        name, datatype, shape = check_input(
            {"name": item.name, "datatype": item.datatype, "shape": list(item.shape)},
            config,
            tensors,
        )
        values = parameters(item.parameters)
        if not SHARED_MEMORY_PARAMETERS.isdisjoint(values):
            if has_contents(item.contents):
                raise BadRequestError(
                    f"input {name!r} names a shared memory region and also carries data"
                )
            window = shared_memory_ref(values, f"input {name!r}")
            check_window_size(name, datatype, shape, window.byte_size)
            data = shared_memory.read(window.region, window.offset, window.byte_size)
            check_binary_size(name, datatype, shape, data)
        elif raw:
            if has_contents(item.contents):
                raise BadRequestError(  # Triton's words: its example clients check them
                    "contents field must not be specified when using raw_input_contents for "
                    f"'{name}' for model '{config.name}'"
                )
            if used >= len(raw):
                raise BadRequestError(
                    f"raw_input_contents has {len(raw)} entries, fewer than the inputs"
                )
            data = raw[used]
            used += 1
            check_binary_size(name, datatype, shape, data)
        else:
            data = tensor_bytes(name, datatype, shape, item.contents)
        tensors.append(Tensor(name, datatype, shape, data))
    if used != len(raw):
        raise BadRequestError(
            f"raw_input_contents has {len(raw)} entries for {used} inputs that need one"
        )
    check_inputs_complete(tensors, config)
    return tuple(tensors)


def _output(item: Any, config: ModelConfig) -> RequestedOutput:
    values = parameters(item.parameters)
    window = (
        None
        if SHARED_MEMORY_PARAMETERS.isdisjoint(values)
        else shared_memory_ref(values, f"output {item.name!r}")
    )
    classification = values.get("classification", 0)
    if not isinstance(classification, int) or isinstance(classification, bool):
        raise BadRequestError(f"output {item.name!r}: classification must be an integer")
    check_output(item.name, classification, config)
    if window is not None and classification:
        raise BadRequestError(
            f"output {item.name!r}: classification into shared memory is not supported"
        )
    return RequestedOutput(item.name, True, classification, window)
