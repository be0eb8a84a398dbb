"""Triton's ``simple_identity``: one BYTES tensor in, the same BYTES out.

Triton's example clients send it strings with embedded NUL characters and raw 4-byte blobs, in
JSON and binary form, and expect every byte back. The graph is a single ONNX ``Identity`` on a
string tensor of shape [batch, -1]; ONNX strings are UTF-8, so elements must be valid UTF-8 (the
examples' are).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from cachefleet.runtime.samples.onnx_build import make_model

MAX_BATCH_SIZE = 8

IDENTITY_CONFIG = f"""name: "simple_identity"
platform: "onnxruntime_onnx"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{
    name: "INPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }}
]
output [
  {{
    name: "OUTPUT0"
    data_type: TYPE_STRING
    dims: [ -1 ]
  }}
]
response_cache {{ enable: true }}
"""


def build_simple_identity() -> onnx.ModelProto:
    """OUTPUT0 = INPUT0, a string tensor of any width."""
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"], name="identity")],
        "simple_identity",
        [helper.make_tensor_value_info("INPUT0", TensorProto.STRING, ["batch", "width"])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.STRING, ["batch", "width"])],
    )
    return make_model(graph)
