"""Render an answer as a ``ModelInferResponse``, the way Triton's gRPC endpoint does.

Triton's gRPC server puts every output's bytes in ``raw_output_contents`` (never the typed
contents), in output order; BYTES outputs, classification included, as 4-byte length-prefixed
elements. Selection and classification are the protocol's, shared with HTTP. An output the
service wrote into a shared-memory region carries the region's parameters instead of bytes; its
``raw_output_contents`` entry is empty, so that the entries of the other outputs keep their
places (tritonclient finds an output's bytes by its position), and when every output went to
shared memory there are none.
"""

from __future__ import annotations

from typing import Any

from cachefleet.runtime.grpc.messages import service_pb2
from cachefleet.runtime.protocol import select_outputs
from cachefleet.runtime.service import InferAnswer


def encode_infer_response(answer: InferAnswer) -> Any:
    """The ``ModelInferResponse`` for ``answer``."""
    model, request = answer.model, answer.request
    response = service_pb2.ModelInferResponse(
        model_name=model.name, model_version=model.version, id=request.id or ""
    )
    selected = select_outputs(
        request,
        answer.outputs,
        model_name=model.name,
        labels=model.labels,
        batched=model.config.max_batch_size > 0,
    )
    for output, tensor in selected:
        entry = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        window = output.shared_memory
        if window is None:
            response.raw_output_contents.append(tensor.data)
            continue
        entry.parameters["shared_memory_region"].string_param = window.region
        entry.parameters["shared_memory_byte_size"].int64_param = len(tensor.data)
        if window.offset:
            entry.parameters["shared_memory_offset"].int64_param = window.offset
        response.raw_output_contents.append(b"")
    if all(output.shared_memory is not None for output, _ in selected):
        del response.raw_output_contents[:]
    return response
