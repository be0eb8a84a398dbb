"""Where and how a model runs: ONNX Runtime execution providers and thread counts.

CUDA is used when present (``auto``), TensorRT only when asked for, by the settings or by the
config's ``tensorrt`` GPU execution accelerator (as in Triton); a config whose instance groups
are all ``KIND_CPU`` runs on the CPU, as in Triton. A provider that is asked for but not
installed is left out with a warning, so the same settings work on GPU and CPU-only nodes.
Thread counts come from the settings, or from the config parameters ``intra_op_thread_count``
and ``inter_op_thread_count`` (the names Triton's onnxruntime backend reads).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.config.settings import ExecutionProvider
from cachefleet.runtime.models.errors import ModelLoadError

logger = logging.getLogger(__name__)

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"
TENSORRT = "TensorrtExecutionProvider"

#: Triton's TensorRT accelerator parameters -> ONNX Runtime TensorRT provider options.
_TRT_OPTIONS = {
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
    "max_partition_iterations": "trt_max_partition_iterations",
    "minimum_segment_size": "trt_min_subgraph_size",
}
_TRT_PRECISION = {"FP16": "trt_fp16_enable", "INT8": "trt_int8_enable"}


@dataclass(frozen=True)
class ProviderChoice:
    """Providers in priority order, with their options, as InferenceSession takes them."""

    names: tuple[str, ...]
    options: tuple[dict[str, str], ...] = field(default=())


@dataclass(frozen=True)
class ExecutionPlan:
    """How to open a model's sessions. Thread counts of 0 leave ONNX Runtime's defaults."""

    providers: ProviderChoice
    intra_op_threads: int = 0
    inter_op_threads: int = 0


def plan_execution(
    config: Mapping[str, Any], settings: ModelSettings, available: Sequence[str]
) -> ExecutionPlan:
    """The plan for one model from its config document (Triton's JSON form) and the settings."""
    groups = config.get("instance_group", [])
    cpu_only = bool(groups) and all(group.get("kind") == "KIND_CPU" for group in groups)
    requested: ExecutionProvider = "cpu" if cpu_only else settings.execution_provider
    return ExecutionPlan(
        choose_providers(requested, available, tensorrt_accelerator(config)),
        _thread_count(config, "intra_op_thread_count", settings.intra_op_threads),
        _thread_count(config, "inter_op_thread_count", settings.inter_op_threads),
    )


def _thread_count(config: Mapping[str, Any], key: str, default: int) -> int:
    text = config.get("parameters", {}).get(key, {}).get("string_value")
    if text is None:
        return default
    if not (text.strip().isascii() and text.strip().isdigit()):
        raise ModelLoadError(
            f"model {config.get('name')!r}: parameter {key} must be a whole number, not {text!r}"
        )
    return int(text)


def tensorrt_accelerator(config: Mapping[str, Any]) -> dict[str, str] | None:
    """The parameters of the config's ``tensorrt`` GPU accelerator, or None if it has none."""
    accelerators = (
        config.get("optimization", {})
        .get("execution_accelerators", {})
        .get("gpu_execution_accelerator", [])
    )
    for accelerator in accelerators:
        if accelerator.get("name") == "tensorrt":
            return dict(accelerator.get("parameters", {}))
    return None


def choose_providers(
    requested: ExecutionProvider,
    available: Sequence[str],
    trt_parameters: Mapping[str, str] | None = None,
) -> ProviderChoice:
    """The providers for one model: ``requested`` from the settings, the config's TensorRT ask
    as ``trt_parameters``, filtered by what this onnxruntime build has."""
    if requested == "cpu":
        return ProviderChoice((CPU,), ({},))
    wanted = [CUDA, CPU]
    if requested == "tensorrt" or trt_parameters is not None:
        wanted.insert(0, TENSORRT)
    explicit = {"cuda": {CUDA}, "tensorrt": {TENSORRT, CUDA}}.get(requested, set())
    if trt_parameters is not None:
        explicit.add(TENSORRT)
    names = [name for name in wanted if name in available or name == CPU]
    missing = sorted(name for name in explicit if name not in available)
    if missing:
        logger.warning(
            "execution provider(s) %s asked for but not in this onnxruntime (has %s); using %s",
            missing,
            list(available),
            names,
        )
    options = [_trt_options(trt_parameters or {}) if name == TENSORRT else {} for name in names]
    return ProviderChoice(tuple(names), tuple(options))


def _trt_options(parameters: Mapping[str, str]) -> dict[str, str]:
    options = {_TRT_OPTIONS[key]: value for key, value in parameters.items() if key in _TRT_OPTIONS}
    precision = _TRT_PRECISION.get(parameters.get("precision_mode", "").upper())
    if precision:
        options[precision] = "True"
    return options
