"""The ONNX Runtime backend: one InferenceSession per model version, made at load.

This is the adapter boundary: canonical Tensors become numpy arrays here and back, and ONNX
Runtime's exceptions become ModelLoadError (at load) or ModelExecutionError (at run). Inputs
arrive validated (``cachefleet.runtime.protocol.validate``: names, shapes, reshape, UTF-8), so
nothing here judges a request.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_state

from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.graph import GraphSignature, GraphTensor
from cachefleet.runtime.models.providers import CUDA, ExecutionPlan
from cachefleet.runtime.models.types import ModelConfig, TensorSpec
from cachefleet.runtime.tensor import Tensor

logger = logging.getLogger(__name__)

#: Errors ONNX Runtime raises from Python (its own types plus the binding's argument checks).
ORT_ERRORS: tuple[type[Exception], ...] = (
    ort_state.Fail,
    ort_state.InvalidArgument,
    ort_state.NoSuchFile,
    ort_state.NoModel,
    ort_state.EngineError,
    ort_state.RuntimeException,
    ort_state.InvalidProtobuf,
    ort_state.ModelLoaded,
    ort_state.NotImplemented,
    ort_state.InvalidGraph,
    ort_state.EPFail,
    RuntimeError,
    ValueError,
    TypeError,
)
_QUIET = 3  # ONNX Runtime log severity: errors only; run failures are reported by us instead.


def open_session(path: Path, plan: ExecutionPlan, *, shown: str) -> ort.InferenceSession:
    """A session on the model file at ``path``; ``shown`` is how a load error names it (the
    client's name for the file, not the server's path, which ONNX Runtime's messages hold)."""
    if CUDA in plan.providers.names:
        load_cuda_libraries()
    options = ort.SessionOptions()
    options.log_severity_level = _QUIET
    if plan.intra_op_threads:
        options.intra_op_num_threads = plan.intra_op_threads
    if plan.inter_op_threads:
        options.inter_op_num_threads = plan.inter_op_threads
    try:
        return ort.InferenceSession(
            str(path),
            sess_options=options,
            providers=list(plan.providers.names),
            provider_options=list(plan.providers.options),
        )
    except ORT_ERRORS as error:
        reason = str(error).replace(str(path), shown)
        raise ModelLoadError(f"{shown}: onnxruntime cannot load it: {reason}") from None


@functools.cache
def load_cuda_libraries() -> None:
    """Load CUDA and cuDNN into the process once, before the first CUDA session.

    onnxruntime-gpu from pip carries no RUNPATH to them: without this it finds them only where
    the dynamic loader already looks (a CUDA base image's library path), and otherwise falls
    back to the CPU with a warning. ``preload_dlls`` (onnxruntime 1.21+) loads them from the
    ``nvidia-*`` wheels when those are installed, else from the loader's path, and says which it
    could not load. A CPU build returns at once; an older onnxruntime has no such function and is
    left to its own loading.
    """
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        logger.info("this onnxruntime cannot preload CUDA libraries; it loads them itself")
        return
    try:
        preload()
    except (OSError, RuntimeError) as error:
        logger.warning("preloading the CUDA libraries failed: %s", error)


def signature_of(session: ort.InferenceSession) -> GraphSignature:
    def tensors(args: Sequence[ort.NodeArg]) -> tuple[GraphTensor, ...]:
        return tuple(GraphTensor.from_node_arg(arg.name, arg.type, arg.shape) for arg in args)

    return GraphSignature(tensors(session.get_inputs()), tensors(session.get_outputs()))


class OnnxModel:
    """One loaded model version. ``run`` is safe to call from several threads at once."""

    def __init__(
        self,
        version: str,
        config: ModelConfig,
        session: ort.InferenceSession,
        labels: Mapping[str, Sequence[str]],
        fingerprint: str,
    ) -> None:
        self._version = version
        self._fingerprint = fingerprint
        self._config = config
        self._session = session
        self._labels = labels
        self._inputs = {spec.name: spec for spec in config.inputs}
        self._output_names = [spec.name for spec in config.outputs]
        self._run_options = ort.RunOptions()
        self._run_options.log_severity_level = 4  # failures are raised, not printed
        #: Set by the loader once it has timed a trial run (``placement.runs_inline``).
        self.quick = False

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def version(self) -> str:
        return self._version

    @property
    def config(self) -> ModelConfig:
        return self._config

    @property
    def labels(self) -> Mapping[str, Sequence[str]]:
        return self._labels

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def providers(self) -> list[str]:
        """The execution providers the session actually uses, in priority order."""
        return list(self._session.get_providers())

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        feeds = {tensor.name: self._to_feed(tensor) for tensor in inputs}
        try:
            results = self._session.run(self._output_names, feeds, self._run_options)
        except ORT_ERRORS as error:
            raise ModelExecutionError(
                f"model {self.name!r} version {self.version} failed: {error}"
            ) from None
        return [
            self._to_tensor(spec, array)
            for spec, array in zip(self._config.outputs, results, strict=True)
        ]

    def _to_feed(self, tensor: Tensor) -> np.ndarray:
        spec = self._inputs[tensor.name]
        array = tensor.to_numpy()
        if tensor.datatype == "BYTES":
            array = _as_strings(array)
        if spec.reshape is not None:
            array = array.reshape(self._model_shape(spec.reshape, array.shape))
        return array

    def _to_tensor(self, spec: TensorSpec, array: np.ndarray) -> Tensor:
        if spec.reshape is not None:
            array = array.reshape(self._model_shape(spec.dims, array.shape))
        return Tensor.from_numpy(spec.name, array, spec.datatype)

    def _model_shape(self, dims: tuple[int, ...], actual: tuple[int, ...]) -> tuple[int, ...]:
        """``dims`` with the batch dimension of ``actual`` in front when the model batches."""
        return (actual[0], *dims) if self._config.max_batch_size > 0 else dims


def _as_strings(array: np.ndarray) -> np.ndarray:
    """BYTES elements as str: ONNX Runtime takes string tensors only as Python str objects."""
    strings = [element.decode("utf-8") for element in array.ravel()]
    result = np.empty(len(strings), dtype=object)
    result[:] = strings
    return result.reshape(array.shape)
