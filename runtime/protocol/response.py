"""Render an inference response from the model's raw outputs, per request.

Runs after the cache: output selection, classification, JSON vs binary and the request id are
applied here, so one cached entry serves every way of asking. With any binary output the body
is the JSON header followed by the raw bytes of the binary outputs, and the header length is
returned for the ``Inference-Header-Content-Length`` response header.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from cachefleet.runtime.protocol.json_data import json_data
from cachefleet.runtime.protocol.outputs import select_outputs
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.tensor import Tensor

_NUMPY = orjson.OPT_SERIALIZE_NUMPY


@dataclass(frozen=True, slots=True)
class EncodedResponse:
    body: bytes
    #: Length of the JSON header when binary outputs follow it; None for a pure JSON body.
    header_length: int | None


def encode_response(
    request: InferRequest,
    outputs: Sequence[Tensor],
    *,
    model_name: str,
    model_version: str,
    labels: Mapping[str, Sequence[str]],
    batched: bool,
) -> EncodedResponse:
    """The response body for ``request`` given every output the model computed."""
    rendered: list[dict[str, Any]] = []
    chunks: list[bytes] = []
    selected = select_outputs(
        request, outputs, model_name=model_name, labels=labels, batched=batched
    )
    for output, tensor in selected:
        entry: dict[str, Any] = {
            "name": tensor.name,
            "datatype": tensor.datatype,
            "shape": tensor.shape,
        }
        if output.shared_memory is not None:  # the service wrote the bytes into the region
            window = output.shared_memory
            entry["parameters"] = {
                "shared_memory_region": window.region,
                "shared_memory_byte_size": len(tensor.data),
            }
            if window.offset:
                entry["parameters"]["shared_memory_offset"] = window.offset
        elif request.binary_output if output.binary is None else output.binary:
            entry["parameters"] = {"binary_data_size": len(tensor.data)}
            chunks.append(tensor.data)
        else:
            entry["data"] = json_data(tensor)
        rendered.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": model_version}
    if request.id is not None:
        document["id"] = request.id
    document["outputs"] = rendered
    header = orjson.dumps(document, option=_NUMPY)
    if not chunks:
        return EncodedResponse(header, None)
    return EncodedResponse(b"".join((header, *chunks)), len(header))
