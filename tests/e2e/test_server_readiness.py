"""Strict readiness (``--strict-readiness``, on by default, as Triton's): a server that could not
load a model it was asked to serve is live but not ready, over HTTP and gRPC alike, so a
readiness probe keeps traffic away from it; relaxed, it is ready once it is up."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from support import loopback
from support.processes import CACHEFLEET, ManagedProcess, ServerProcess, free_port

from cachefleet.bench.processes import http_ok

pytestmark = pytest.mark.slow


@pytest.fixture
def half_broken(model_repository: Path, tmp_path: Path) -> Path:
    """``simple``, and ``broken`` whose model file is not ONNX: it fails to load."""
    repository = tmp_path / "repo"
    shutil.copytree(model_repository / "simple", repository / "simple")
    shutil.copytree(model_repository / "simple", repository / "broken")
    config = repository / "broken" / "config.pbtxt"
    config.write_text(config.read_text().replace('name: "simple"', 'name: "broken"'))
    (repository / "broken" / "1" / "model.onnx").write_bytes(b"not a model")
    return repository


class Started:
    """A server waited for until live (ready may never come), on its own ports."""

    def __init__(self, managed: ManagedProcess, port: int, grpc_port: int) -> None:
        self.managed, self.port, self.grpc_port = managed, port, grpc_port

    def ready(self) -> httpx.Response:
        return loopback.get(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=10)

    def grpc_ready(self) -> bool:
        client = grpcclient.InferenceServerClient(f"127.0.0.1:{self.grpc_port}")
        try:
            return bool(client.is_server_ready())
        finally:
            client.close()


@pytest.fixture
def start_live(tmp_path: Path) -> Iterator[Callable[..., Started]]:
    started: list[ManagedProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> Started:
        port, grpc_port = free_port(), free_port()
        command = [*CACHEFLEET, "serve", "--host", "127.0.0.1", "--port", str(port),
                   "--grpc-port", str(grpc_port), *args]  # fmt: skip
        log = tmp_path / f"serve-{port}.log"
        managed = ManagedProcess("cachefleet serve", command, log, {**os.environ, **(env or {})})
        started.append(managed)
        managed.wait_until(http_ok(f"http://127.0.0.1:{port}/v2/health/live"), 180)
        # Live comes with the app; the models are loaded once the index answers.
        index = f"http://127.0.0.1:{port}/v2/repository/index"
        managed.wait_until(lambda: loopback.post(index, timeout=10).status_code == 200, 180)
        return Started(managed, port, grpc_port)

    yield start
    for managed in started:
        managed.stop()


def test_a_model_that_failed_to_load_keeps_the_server_not_ready(
    start_live: Callable[..., Started], half_broken: Path
) -> None:
    server = start_live("--model-repository", str(half_broken))
    answer = server.ready()
    assert answer.status_code == 503
    assert "broken" in answer.json()["error"]
    assert "--strict-readiness" in answer.json()["error"]
    assert server.grpc_ready() is False
    # The models that did load still serve.
    model = loopback.get(f"http://127.0.0.1:{server.port}/v2/models/simple/ready", timeout=10)
    assert model.status_code == 200


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (("--no-strict-readiness",), {}),
        (("--strict-readiness", "false"), {}),
        ((), {"CACHEFLEET_STRICT_READINESS": "false"}),
    ],
)
def test_relaxed_readiness_is_ready_with_a_failed_model(
    make_server: Callable[..., ServerProcess],
    half_broken: Path,
    args: tuple[str, ...],
    env: dict[str, str],
) -> None:
    server = make_server(*args, env=env, repository=half_broken)  # waits for ready
    assert loopback.get(f"{server.base_url}/v2/health/ready", timeout=10).status_code == 200
    client = grpcclient.InferenceServerClient(server.grpc_url)
    assert client.is_server_ready() is True
    client.close()


def test_explicit_mode_judges_only_the_models_asked_for(
    start_live: Callable[..., Started], half_broken: Path
) -> None:
    explicit = ("--model-repository", str(half_broken), "--model-control-mode", "explicit")
    fine = start_live(*explicit, "--load-model", "simple")
    assert fine.ready().status_code == 200  # ``broken`` was never asked for
    assert fine.grpc_ready() is True
    missing = start_live(*explicit, "--load-model", "simple", "--load-model", "absent")
    assert missing.ready().status_code == 503
    assert "absent" in missing.ready().json()["error"]
    assert missing.grpc_ready() is False
