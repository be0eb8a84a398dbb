"""Triton's classic add/sub samples: ``simple`` (INT32), ``simple_int8`` and ``simple_string``.

Each takes two [batch, 16] tensors and returns their sum and difference (``simple_int8`` wraps
around on overflow, as INT8 arithmetic does in numpy and in Triton's own sample).
``simple_string`` carries decimal integers as strings, so it exercises the BYTES path end to
end: ONNX casts the strings to INT32, computes, and casts back.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from cachefleet.runtime.samples.onnx_build import make_model

WIDTH = 16
MAX_BATCH_SIZE = 8


def _value(name: str, elem_type: int) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, ["batch", WIDTH])


def build_simple() -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1, all INT32."""
    return _add_sub("simple", TensorProto.INT32)


def build_simple_int8() -> onnx.ModelProto:
    """The ``simple`` arithmetic on INT8 (Triton's ``simple_int8``)."""
    return _add_sub("simple_int8", TensorProto.INT8)


def _add_sub(name: str, elem_type: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"], name="add"),
        helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"], name="sub"),
    ]
    graph = helper.make_graph(
        nodes,
        name,
        [_value("INPUT0", elem_type), _value("INPUT1", elem_type)],
        [_value("OUTPUT0", elem_type), _value("OUTPUT1", elem_type)],
    )
    return make_model(graph)


def build_simple_string() -> onnx.ModelProto:
    """The same arithmetic on decimal strings: cast in, compute in INT32, cast out."""
    string, int32 = TensorProto.STRING, TensorProto.INT32
    nodes = [
        helper.make_node("Cast", ["INPUT0"], ["a"], to=int32, name="parse0"),
        helper.make_node("Cast", ["INPUT1"], ["b"], to=int32, name="parse1"),
        helper.make_node("Add", ["a", "b"], ["sum"], name="add"),
        helper.make_node("Sub", ["a", "b"], ["difference"], name="sub"),
        helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=string, name="format0"),
        helper.make_node("Cast", ["difference"], ["OUTPUT1"], to=string, name="format1"),
    ]
    graph = helper.make_graph(
        nodes,
        "simple_string",
        [_value("INPUT0", string), _value("INPUT1", string)],
        [_value("OUTPUT0", string), _value("OUTPUT1", string)],
    )
    return make_model(graph)


def arithmetic_config(name: str, data_type: str) -> str:
    """The config.pbtxt of an add/sub sample."""
    tensors = []
    for kind, names in (("input", ("INPUT0", "INPUT1")), ("output", ("OUTPUT0", "OUTPUT1"))):
        entries = ",\n".join(
            f'  {{\n    name: "{tensor}"\n    data_type: {data_type}\n    dims: [ {WIDTH} ]\n  }}'
            for tensor in names
        )
        tensors.append(f"{kind} [\n{entries}\n]")
    return (
        f'name: "{name}"\n'
        'platform: "onnxruntime_onnx"\n'
        f"max_batch_size: {MAX_BATCH_SIZE}\n" + "\n".join(tensors) + "\n"
        "response_cache { enable: true }\n"
    )
