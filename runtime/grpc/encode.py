"""Render an answer as a ``ModelInferResponse``, the way Triton's gRPC endpoint does.

Triton's gRPC server puts every output's bytes in ``raw_output_contents`` (never the typed
contents), in output order; BYTES outputs, classification included, as 4-byte length-prefixed
elements. Selection and classification are the protocol's, shared with HTTP.
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
    for _, tensor in selected:
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        response.raw_output_contents.append(tensor.data)
    return response
