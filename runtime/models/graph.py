"""What an ONNX graph takes and gives, and how a config is checked against it or derived from it.

Triton derives a missing config.pbtxt from the model ("auto-complete") and refuses a config that
contradicts the model; both are done here, so a mistake shows up at load with a reason rather
than as a failed request later.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cachefleet.runtime.models.config_message import ConfigMessage, new_model_config
from cachefleet.runtime.models.datatypes import KSERVE_TO_CONFIG, ORT_TO_KSERVE
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.types import ModelConfig, TensorSpec

#: Triton's default max_batch_size for an auto-completed model that can batch.
DERIVED_MAX_BATCH_SIZE = 4


@dataclass(frozen=True)
class GraphTensor:
    """A graph input or output. ``shape`` holds None for symbolic or unknown dimensions."""

    name: str
    onnx_type: str
    shape: tuple[int | None, ...]

    @property
    def datatype(self) -> str | None:
        """The KServe datatype, or None when the server cannot carry this type."""
        return ORT_TO_KSERVE.get(self.onnx_type)

    @classmethod
    def from_node_arg(
        cls, name: str, onnx_type: str, shape: Sequence[object] | None
    ) -> GraphTensor:
        """From ONNX Runtime's NodeArg: symbolic dims are strings, unknown ones None."""
        dims = tuple(dim if isinstance(dim, int) and dim >= 0 else None for dim in shape or ())
        return cls(name, onnx_type, dims)


@dataclass(frozen=True)
class GraphSignature:
    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]

    def can_batch(self) -> bool:
        """Every input and output has a free first dimension: Triton's test for batching."""
        tensors = self.inputs + self.outputs
        return bool(tensors) and all(t.shape and t.shape[0] is None for t in tensors)


def derive_config(
    name: str, signature: GraphSignature, *, batching: bool | None = None
) -> ConfigMessage:
    """A config for a model that has none, as Triton's auto-complete would write it.

    ``batching`` None lets the graph decide; True reads each first dimension as the batch.
    """
    if batching is None:
        batching = signature.can_batch()
    config = new_model_config(name=name)
    config.max_batch_size = DERIVED_MAX_BATCH_SIZE if batching else 0
    for kind, tensors in (("input", signature.inputs), ("output", signature.outputs)):
        for tensor in tensors:
            if tensor.datatype is None:
                raise ModelLoadError(
                    f"model {name!r}: {kind} {tensor.name!r} has type {tensor.onnx_type}, "
                    "which this server cannot serve"
                )
            entry = getattr(config, kind).add()
            entry.name = tensor.name
            entry.data_type = KSERVE_TO_CONFIG[tensor.datatype]
            dims = tensor.shape[1:] if batching else tensor.shape
            entry.dims.extend(-1 if dim is None else dim for dim in dims)
    return config


def check_config(config: ModelConfig, signature: GraphSignature) -> None:
    """Raise ModelLoadError when ``config`` contradicts the graph."""
    graph_inputs = {tensor.name: tensor for tensor in signature.inputs}
    graph_outputs = {tensor.name: tensor for tensor in signature.outputs}
    for kind, specs, graph in (
        ("input", config.inputs, graph_inputs),
        ("output", config.outputs, graph_outputs),
    ):
        for spec in specs:
            tensor = graph.get(spec.name)
            if tensor is None:
                raise ModelLoadError(
                    f"model {config.name!r}: config {kind} {spec.name!r} is not an {kind} of the "
                    f"model (the model has {sorted(graph)})"
                )
            _check_tensor(config, kind, spec, tensor)
    declared = {spec.name for spec in config.inputs}
    missing = sorted(set(graph_inputs) - declared)
    if missing:
        raise ModelLoadError(
            f"model {config.name!r}: the model needs input(s) {missing}, "
            "which the config does not declare"
        )


def _check_tensor(config: ModelConfig, kind: str, spec: TensorSpec, tensor: GraphTensor) -> None:
    where = f"model {config.name!r}: {kind} {spec.name!r}"
    if tensor.datatype != spec.datatype:
        config_type = KSERVE_TO_CONFIG.get(spec.datatype, spec.datatype)
        raise ModelLoadError(
            f"{where}: the config says {config_type} but the model has {tensor.onnx_type}"
        )
    if not tensor.shape:
        return  # a scalar, or a shape the graph does not state: ONNX Runtime checks at run time
    expected: tuple[int | None, ...] = spec.reshape if spec.reshape is not None else spec.dims
    if config.max_batch_size > 0:
        # A fixed first dimension of 1 serves max_batch_size 1, as in Triton's densenet_onnx.
        batch = tensor.shape[0]
        if not (batch is None or batch == 1 == config.max_batch_size):
            raise ModelLoadError(
                f"{where}: max_batch_size is {config.max_batch_size} but the model's first "
                f"dimension is not a free batch dimension (model shape {_show(tensor.shape)})"
            )
        expected = (None, *expected)
    fits = len(expected) == len(tensor.shape) and all(
        want in (None, -1) or have is None or want == have
        for want, have in zip(expected, tensor.shape, strict=True)
    )
    if not fits:
        raise ModelLoadError(
            f"{where}: the config shape {_show(expected)} does not fit the model shape "
            f"{_show(tensor.shape)}"
        )


def _show(shape: Sequence[int | None]) -> str:
    return "[" + ", ".join("-1" if dim is None else str(dim) for dim in shape) + "]"
