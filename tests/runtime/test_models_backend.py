"""The ONNX Runtime backend: providers, threads, tensor conversion and error translation."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.errors import ModelExecutionError
from cachefleet.runtime.models import onnx_backend
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.providers import (
    CPU,
    CUDA,
    TENSORRT,
    ExecutionPlan,
    choose_providers,
    plan_execution,
)
from cachefleet.runtime.models.repository import LocalModelRepository, load_repository
from cachefleet.runtime.tensor import Tensor

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

GPU_HOST = [TENSORRT, CUDA, CPU]


@pytest.fixture(scope="module")
def repository(model_repository: Path) -> LocalModelRepository:
    return load_repository(model_repository, ModelSettings())


def strings(values: np.ndarray) -> Tensor:
    array = np.vectorize(lambda value: str(value).encode(), otypes=[object])(values)
    return Tensor.from_numpy("INPUT0", array, "BYTES")


@pytest.mark.parametrize(
    ("requested", "available", "expected"),
    [
        ("cpu", GPU_HOST, (CPU,)),
        ("auto", GPU_HOST, (CUDA, CPU)),
        ("auto", [CPU], (CPU,)),
        ("cuda", GPU_HOST, (CUDA, CPU)),
        ("tensorrt", GPU_HOST, (TENSORRT, CUDA, CPU)),
        ("tensorrt", [CPU], (CPU,)),
    ],
)
def test_provider_choice(requested: str, available: list[str], expected: tuple[str, ...]) -> None:
    assert choose_providers(requested, available).names == expected  # type: ignore[arg-type]


def test_config_tensorrt_accelerator_asks_for_tensorrt_with_its_options() -> None:
    config = {
        "optimization": {
            "execution_accelerators": {
                "gpu_execution_accelerator": [
                    {"name": "tensorrt", "parameters": {"precision_mode": "FP16"}}
                ]
            }
        }
    }
    plan = plan_execution(config, ModelSettings(), GPU_HOST)
    assert plan.providers.names == (TENSORRT, CUDA, CPU)
    assert plan.providers.options[0] == {"trt_fp16_enable": "True"}


def test_cpu_instance_groups_keep_a_model_on_the_cpu() -> None:
    config = {"instance_group": [{"kind": "KIND_CPU", "count": 2}]}
    assert plan_execution(config, ModelSettings(), GPU_HOST).providers.names == (CPU,)


def test_thread_counts_come_from_settings_or_config_parameters() -> None:
    settings = ModelSettings(intra_op_threads=2, inter_op_threads=1)
    plan = plan_execution({}, settings, [CPU])
    assert (plan.intra_op_threads, plan.inter_op_threads) == (2, 1)
    config = {"parameters": {"intra_op_thread_count": {"string_value": "3"}}}
    assert plan_execution(config, settings, [CPU]).intra_op_threads == 3
    config = {"parameters": {"intra_op_thread_count": {"string_value": "many"}}}
    with pytest.raises(ModelLoadError, match="whole number"):
        plan_execution(config, settings, [CPU])


@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_gpu_settings_still_load_on_a_cpu_only_host(
    model_repository: Path, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = ModelSettings(execution_provider=provider, intra_op_threads=1)
    with caplog.at_level(logging.INFO):
        loaded = load_repository(model_repository, settings)
    assert {entry.state for entry in loaded.index()} == {"READY"}
    assert "asked for but not in this onnxruntime" in caplog.text
    assert "READY on ['CPUExecutionProvider']" in caplog.text


def test_concurrent_runs_get_their_own_results(repository: LocalModelRepository) -> None:
    model = repository.get("simple")

    def run(seed: int) -> None:
        for offset in range(25):
            a = np.full((2, 16), seed * 100 + offset, dtype=np.int32)
            b = np.arange(32, dtype=np.int32).reshape(2, 16)
            total, difference = model.run(
                [Tensor.from_numpy("INPUT0", a), Tensor.from_numpy("INPUT1", b)]
            )
            np.testing.assert_array_equal(total.to_numpy(), a + b)
            np.testing.assert_array_equal(difference.to_numpy(), a - b)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(run, range(8)))


def test_bytes_tensors_round_trip_as_bytes(repository: LocalModelRepository) -> None:
    a = np.array([[-5, 7, 123456, 0] * 4], dtype=np.int32)
    second = strings(a * 2)
    inputs = [strings(a), Tensor("INPUT1", "BYTES", second.shape, second.data)]
    total, difference = repository.get("simple_string").run(inputs)
    assert (total.datatype, total.shape) == ("BYTES", (1, 16))
    assert total.to_numpy().tolist() == [[str(v).encode() for v in row] for row in a * 3]
    assert difference.to_numpy().tolist() == [[str(v).encode() for v in row] for row in -a]


def test_model_failure_is_a_model_execution_error(repository: LocalModelRepository) -> None:
    words = strings(np.array([["not a number"] * 16], dtype=object))
    inputs = [words, Tensor("INPUT1", "BYTES", words.shape, words.data)]
    with pytest.raises(ModelExecutionError, match="'simple_string' version 1 failed") as error:
        repository.get("simple_string").run(inputs)
    assert error.value.status_code == 500


def test_densenet_output_has_the_config_datatype_and_shape(
    repository: LocalModelRepository,
) -> None:
    image = np.random.default_rng(1).random((3, 224, 224), dtype=np.float32)
    (scores,) = repository.get("densenet_onnx").run([Tensor.from_numpy("data_0", image)])
    assert (scores.name, scores.datatype, scores.shape) == ("fc6_1", "FP32", (1000, 1, 1))
    assert np.isfinite(scores.to_numpy()).all()


#: How a load error names the sample model's file (the client's name, not the server's path).
SHOWN = "simple/1/model.onnx"


def _simple_model(model_repository: Path) -> Path:
    return model_repository / "simple" / "1" / "model.onnx"


def _sums(session: ort.InferenceSession) -> np.ndarray:
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    outputs = session.run(["OUTPUT0"], {"INPUT0": data, "INPUT1": data})
    return np.asarray(outputs[0])


@pytest.fixture
def preloads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Records each call of onnxruntime's preload_dlls (no GPU here to load libraries for)."""
    calls: list[str] = []
    monkeypatch.setattr(ort, "preload_dlls", lambda: calls.append("preload"))
    onnx_backend.load_cuda_libraries.cache_clear()
    yield calls
    onnx_backend.load_cuda_libraries.cache_clear()


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # no CUDA on this host
def test_a_cuda_plan_preloads_the_cuda_libraries_once(
    model_repository: Path, preloads: list[str]
) -> None:
    """onnxruntime-gpu from pip has no RUNPATH to CUDA: the runtime loads it before a session."""
    plan = ExecutionPlan(choose_providers("cuda", [CUDA, CPU]))
    for _ in range(2):
        session = onnx_backend.open_session(_simple_model(model_repository), plan, shown=SHOWN)
    assert preloads == ["preload"]
    assert (_sums(session) == 2 * np.arange(16)).all()  # no CUDA here: it ran on the CPU


def test_a_cpu_plan_never_loads_cuda(model_repository: Path, preloads: list[str]) -> None:
    plan = plan_execution({}, ModelSettings(execution_provider="cpu"), [CUDA, CPU])
    onnx_backend.open_session(_simple_model(model_repository), plan, shown=SHOWN)
    assert preloads == []


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # no CUDA on this host
def test_a_cuda_plan_opens_on_an_onnxruntime_without_preload_dlls(
    model_repository: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(ort, "preload_dlls", raising=False)
    onnx_backend.load_cuda_libraries.cache_clear()
    try:
        plan = ExecutionPlan(choose_providers("cuda", [CUDA, CPU]))
        session = onnx_backend.open_session(_simple_model(model_repository), plan, shown=SHOWN)
    finally:
        onnx_backend.load_cuda_libraries.cache_clear()
    assert (_sums(session) == 2 * np.arange(16)).all()


@pytest.mark.filterwarnings("ignore:Specified provider:UserWarning")  # no CUDA on this host
def test_a_cuda_plan_opens_with_this_cpu_onnxruntimes_own_preload_dlls(
    model_repository: Path,
) -> None:
    """The real function of a CPU build (it has one, and returns at once): nothing breaks."""
    onnx_backend.load_cuda_libraries.cache_clear()
    plan = ExecutionPlan(choose_providers("cuda", [CUDA, CPU]))
    session = onnx_backend.open_session(_simple_model(model_repository), plan, shown=SHOWN)
    assert (_sums(session) == 2 * np.arange(16)).all()
