"""The runtime started as KServe starts it from ``examples/kserve``: the runtime's own args
(``{{.Name}}`` filled in, ``/mnt/models`` a folder laid out as the storage initializer leaves it)
serve a v2 infer over HTTP, and the second answer comes from the cache."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from support.processes import ServerProcess
from support.sample_requests import infer

pytestmark = pytest.mark.slow

RUNTIME = Path(__file__).parents[2] / "examples" / "kserve" / "cluster-serving-runtime.yaml"
MOUNT = "/mnt/models"


def kserve_args(name: str, models: Path, server: ServerProcess) -> list[str]:
    """The container's args after ``serve``, as KServe would run them, on this test's folder and
    free ports (in a pod they are 8080 and 9000; the test's ports come after and win)."""
    [container] = yaml.safe_load(RUNTIME.read_text())["spec"]["containers"]
    command, *args = container["args"]
    assert command == "serve"
    templated = [arg.replace("{{.Name}}", name).replace(MOUNT, str(models)) for arg in args]
    assert f"--model-repository={models}" in templated
    assert f"--model-name={name}" in templated
    return [*templated, "--port", str(server.port), "--grpc-port", str(server.grpc_port)]


def start(name: str, models: Path, tmp_path: Path, env: dict[str, Any]) -> ServerProcess:
    server = ServerProcess([], tmp_path)
    server.args = kserve_args(name, models, server)
    server.env = {key: str(value) for key, value in env.items()}
    server.start()
    return server


def runtime_env() -> dict[str, Any]:
    [container] = yaml.safe_load(RUNTIME.read_text())["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def served_twice(server: ServerProcess, model: str) -> list[str]:
    try:
        answers = [infer(server, model, seed=7) for _ in range(2)]
    finally:
        server.stop()
    (first, result), (second, again) = answers
    first_sum = result.as_numpy("OUTPUT0")
    np.testing.assert_array_equal(first_sum, np.arange(16).reshape(1, 16) + 7 + 1)
    np.testing.assert_array_equal(again.as_numpy("OUTPUT0"), first_sum)
    return [first.headers["X-Cache"], second.headers["X-Cache"]]


def test_onnx_format_bare_model_file_is_served_under_the_inference_service_name(
    model_repository: Path, tmp_path: Path
) -> None:
    # The onnx format: the storage initializer leaves the bytes of model.onnx and nothing else.
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(model_repository / "simple" / "1" / "model.onnx", models / "model.onnx")
    server = start("simple", models, tmp_path, runtime_env())
    assert served_twice(server, "simple") == ["miss", "hit-local"]


def test_triton_format_repository_keeps_its_folder_names(
    model_repository: Path, tmp_path: Path
) -> None:
    # The triton format: a Triton repository; {{.Name}} (the InferenceService) names no model.
    models = tmp_path / "models"
    shutil.copytree(model_repository / "simple", models / "simple")
    server = start("my-service", models, tmp_path, runtime_env())
    assert served_twice(server, "simple") == ["miss", "hit-local"]
