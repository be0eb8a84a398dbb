"""How every sample is turned into an ONNX model: one IR version, one opset.

The ``onnx`` package writes its newest IR version by default, which older onnxruntime releases
refuse to load; pinning both numbers keeps the files loadable and byte-identical over time.
"""

from __future__ import annotations

import onnx
from onnx import helper

#: Highest IR version every supported onnxruntime reads.
IR_VERSION = 8
OPSET = 17


def make_model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """Wrap ``graph`` with the pinned IR version and opset, and check it."""
    model = helper.make_model(
        graph,
        ir_version=IR_VERSION,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="cachefleet-samples",
    )
    onnx.checker.check_model(model)
    return model
