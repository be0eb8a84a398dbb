"""Model configurations and request builders shared by the protocol unit tests.

Requests are built by the real ``tritonclient.http`` (``generate_request_body``), so the codec is
tested against the bytes the client actually sends.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson
import tritonclient.http as httpclient

from cachefleet.runtime.models.types import ModelConfig, TensorSpec

SIMPLE = ModelConfig(
    name="simple",
    platform="onnxruntime_onnx",
    backend="onnxruntime",
    max_batch_size=8,
    inputs=(TensorSpec("INPUT0", "INT32", (16,)), TensorSpec("INPUT1", "INT32", (16,))),
    outputs=(TensorSpec("OUTPUT0", "INT32", (16,)), TensorSpec("OUTPUT1", "INT32", (16,))),
)
STRINGS = ModelConfig(
    name="simple_string",
    platform="onnxruntime_onnx",
    backend="onnxruntime",
    max_batch_size=8,
    inputs=(TensorSpec("INPUT0", "BYTES", (16,)), TensorSpec("INPUT1", "BYTES", (16,))),
    outputs=(TensorSpec("OUTPUT0", "BYTES", (16,)), TensorSpec("OUTPUT1", "BYTES", (16,))),
)
IMAGE = ModelConfig(
    name="image",
    platform="onnxruntime_onnx",
    backend="onnxruntime",
    max_batch_size=0,
    inputs=(TensorSpec("data_0", "FP32", (3, 4, -1)),),
    outputs=(TensorSpec("fc6_1", "FP32", (10, 1, 1), label_filename="labels.txt"),),
)


def triton_body(
    inputs: dict[str, np.ndarray],
    datatypes: dict[str, str],
    *,
    binary: bool,
    outputs: list[Any] | None = None,
    request_id: str = "",
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, int | None]:
    """The body and header length that tritonclient sends for ``inputs``."""
    infer_inputs = []
    for name, array in inputs.items():
        infer_input = httpclient.InferInput(name, list(array.shape), datatypes[name])
        infer_input.set_data_from_numpy(array, binary_data=binary)
        infer_inputs.append(infer_input)
    body, length = httpclient.InferenceServerClient.generate_request_body(
        infer_inputs, outputs=outputs, request_id=request_id, parameters=parameters
    )
    return (body.encode() if isinstance(body, str) else body), length


def json_body(document: dict[str, Any]) -> bytes:
    return orjson.dumps(document)


def simple_inputs(batch: int = 1) -> dict[str, np.ndarray]:
    first = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    return {"INPUT0": first, "INPUT1": np.full((batch, 16), 3, dtype=np.int32)}
