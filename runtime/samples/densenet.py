"""DenseNet-121 (Huang et al., 2017) with seeded random weights, served as ``densenet_onnx``.

The topology is the real one, so the model costs what the real one costs to run (about 2.9
GFLOPs per image), which is what a cache benchmark needs; the weights are random, so its
classifications mean nothing. The served shapes match Triton's ``densenet_onnx`` example:
``data_0`` FP32 [3, 224, 224] in, ``fc6_1`` FP32 [1000, 1, 1] out, no batching (the graph adds
and removes the batch dimension itself). ``densenet_batch`` is the same network and weights with
a batch dimension, for the dynamic batcher and the row cache.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from cachefleet.runtime.samples.onnx_build import make_model

INPUT = "data_0"
OUTPUT = "fc6_1"
CLASSES = 1000
SEED = 121
GROWTH = 32
BLOCK_LAYERS = (6, 12, 24, 16)
STEM_CHANNELS = 64
BOTTLENECK = 4 * GROWTH
BN_EPSILON = 1e-5


@dataclass
class _GraphBuilder:
    """Accumulates nodes and initializers; weights come from one seeded generator in order."""

    rng: np.random.Generator
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)

    def constant(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def conv(self, x: str, name: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
        """A bias-free convolution, He-initialised so activations keep their scale."""
        std = np.sqrt(2.0 / (c_in * kernel * kernel))
        shape = (c_out, c_in, kernel, kernel)
        weight = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        pad = kernel // 2
        return self.node(
            "Conv",
            [x, self.constant(f"{name}_w", weight)],
            name,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )

    def bn_relu(self, x: str, name: str, channels: int) -> str:
        """Inference-mode batch normalisation with plausible statistics, then ReLU."""
        rng = self.rng
        scale = rng.uniform(0.8, 1.2, channels).astype(np.float32)
        bias = (rng.standard_normal(channels, dtype=np.float32) * np.float32(0.05)).astype(
            np.float32
        )
        mean = (rng.standard_normal(channels, dtype=np.float32) * np.float32(0.05)).astype(
            np.float32
        )
        var = rng.uniform(0.8, 1.2, channels).astype(np.float32)
        params = [
            self.constant(f"{name}_{part}", value)
            for part, value in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))
        ]
        normed = self.node("BatchNormalization", [x, *params], f"{name}_bn", epsilon=BN_EPSILON)
        return self.node("Relu", [normed], f"{name}_relu")


def _dense_block(g: _GraphBuilder, x: str, channels: int, block: int, layers: int) -> str:
    for layer in range(1, layers + 1):
        name = f"block{block}_layer{layer}"
        h = g.bn_relu(x, f"{name}_norm1", channels)
        h = g.conv(h, f"{name}_conv1", channels, BOTTLENECK, 1)
        h = g.bn_relu(h, f"{name}_norm2", BOTTLENECK)
        h = g.conv(h, f"{name}_conv2", BOTTLENECK, GROWTH, 3)
        x = g.node("Concat", [x, h], f"{name}_concat", axis=1)
        channels += GROWTH
    return x


def _transition(g: _GraphBuilder, x: str, channels: int, block: int) -> str:
    name = f"transition{block}"
    h = g.bn_relu(x, f"{name}_norm", channels)
    h = g.conv(h, f"{name}_conv", channels, channels // 2, 1)
    return g.node("AveragePool", [h], f"{name}_pool", kernel_shape=[2, 2], strides=[2, 2])


def build_densenet(seed: int = SEED, *, batched: bool = False) -> onnx.ModelProto:
    """DenseNet-121; the same seed always gives the same bytes.

    ``batched``: the graph takes and gives a leading batch dimension (``densenet_batch``)
    instead of adding and removing one; the weights are the same.
    """
    g = _GraphBuilder(np.random.default_rng(seed))
    axes = "" if batched else g.constant("batch_axis", np.array([0], dtype=np.int64))
    x = INPUT if batched else g.node("Unsqueeze", [INPUT, axes], "batched_input")
    x = g.conv(x, "conv0", 3, STEM_CHANNELS, 7, stride=2)
    x = g.bn_relu(x, "norm0", STEM_CHANNELS)
    x = g.node("MaxPool", [x], "pool0", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = STEM_CHANNELS
    for block, layers in enumerate(BLOCK_LAYERS, start=1):
        x = _dense_block(g, x, channels, block, layers)
        channels += layers * GROWTH
        if block < len(BLOCK_LAYERS):
            x = _transition(g, x, channels, block)
            channels //= 2
    x = g.bn_relu(x, "norm5", channels)
    x = g.node("GlobalAveragePool", [x], "pool5")
    std = np.float32(np.sqrt(1.0 / channels))
    weight = g.rng.standard_normal((CLASSES, channels, 1, 1), dtype=np.float32) * std
    bias = np.zeros(CLASSES, dtype=np.float32)
    w, b = g.constant("fc6_w", weight), g.constant("fc6_b", bias)
    if batched:
        g.node("Conv", [x, w, b], OUTPUT, kernel_shape=[1, 1])
    else:
        x = g.node("Conv", [x, w, b], "fc6", kernel_shape=[1, 1])
        g.node("Squeeze", [x, axes], OUTPUT)
    batch: list[int | str] = ["batch"] if batched else []
    graph = helper.make_graph(
        g.nodes,
        "densenet121",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [*batch, 3, 224, 224])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [*batch, CLASSES, 1, 1])],
        initializer=g.initializers,
    )
    return make_model(graph)


def build_densenet_batch() -> onnx.ModelProto:
    return build_densenet(batched=True)


def densenet_labels() -> list[str]:
    """One label per class. The weights are random, so the names are placeholders too."""
    return [f"class_{index:04d}" for index in range(CLASSES)]


def _config(name: str, max_batch_size: int, extra: str = "") -> str:
    """config.pbtxt of the network under ``name``; both samples share inputs, outputs, labels."""
    return f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch_size}
input [
  {{
    name: "{INPUT}"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
  }}
]
output [
  {{
    name: "{OUTPUT}"
    data_type: TYPE_FP32
    dims: [ {CLASSES}, 1, 1 ]
    label_filename: "densenet_labels.txt"
  }}
]
response_cache {{ enable: true }}
{extra}"""


DENSENET_CONFIG = _config("densenet_onnx", 0)

#: The same network with a batch dimension: misses are merged by the dynamic batcher (a short
#: queue delay: a miss waits at most 2 ms for company), and each row is cached on its own.
DENSENET_BATCH_CONFIG = _config(
    "densenet_batch",
    8,
    "dynamic_batching { max_queue_delay_microseconds: 2000 }\n"
    'parameters { key: "cachefleet.row_cache" value: { string_value: "true" } }\n',
)
