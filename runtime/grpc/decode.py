"""Decode a ``ModelInferRequest`` into the same :class:`InferRequest` the HTTP side builds.

Inputs are checked by the protocol's own validators (name, datatype, shape, byte size), so a
request is refused over gRPC exactly when it would be over HTTP, with the same message. The
request parameters are read into plain values, so that the same parameters sent over either
transport reach the cache key equal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.grpc.contents import has_contents, tensor_bytes
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol.request import InferRequest, RequestedOutput
from cachefleet.runtime.protocol.validate import (
    check_binary_size,
    check_input,
    check_inputs_complete,
    check_output,
)
from cachefleet.runtime.tensor import Tensor

_SHARED_MEMORY = frozenset(
    {"shared_memory_region", "shared_memory_byte_size", "shared_memory_offset"}
)


def decode_infer_request(message: Any, config: ModelConfig) -> InferRequest:
    """Parse and validate ``message`` for the model ``config``; raises BadRequestError."""
    return InferRequest(
        id=message.id or None,
        inputs=_inputs(message, config),
        outputs=tuple(_output(item, config) for item in message.outputs),
        parameters=parameters(message.parameters),
        # gRPC answers always carry raw_output_contents; there is no JSON rendering to choose.
        binary_output=True,
    )


def parameters(entries: Mapping[str, Any]) -> dict[str, Any]:
    """``map<string, InferParameter>`` as plain values (bool, int, str or float)."""
    values: dict[str, Any] = {}
    for key, parameter in entries.items():
        choice = parameter.WhichOneof("parameter_choice")
        if choice is not None:
            values[key] = getattr(parameter, choice)
    return values


def _inputs(message: Any, config: ModelConfig) -> tuple[Tensor, ...]:
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
        if not _SHARED_MEMORY.isdisjoint(item.parameters):
            raise BadRequestError(f"input {name!r}: shared memory is not supported")
        if raw:
            if has_contents(item.contents):
                raise BadRequestError(
                    f"input {name!r} has typed contents, but the request uses raw_input_contents"
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
    if not _SHARED_MEMORY.isdisjoint(values):
        raise BadRequestError(f"output {item.name!r}: shared memory is not supported")
    classification = values.get("classification", 0)
    if not isinstance(classification, int) or isinstance(classification, bool):
        raise BadRequestError(f"output {item.name!r}: classification must be an integer")
    check_output(item.name, classification, config)
    return RequestedOutput(item.name, True, classification)
