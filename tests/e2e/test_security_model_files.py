"""Model files in a load request (Triton's ``file:`` parameters): staged privately, confined,
bounded, and answered as Triton answers them, over HTTP and gRPC."""

from __future__ import annotations

import base64
import json
import shutil
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import loopback, raw_http
from support.processes import ServerProcess
from tritonclient.utils import InferenceServerException

LIMIT = 256 * 1024


@pytest.fixture
def temporary(tmp_path: Path) -> Path:
    """The server's TMPDIR, to see that no staged copy outlives its load."""
    folder = tmp_path / "server-tmp"
    folder.mkdir()
    return folder


@pytest.fixture
def explicit(make_server: Callable[..., ServerProcess], temporary: Path) -> ServerProcess:
    return make_server(
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--max-request-size", str(LIMIT), env={"TMPDIR": str(temporary)},
    )  # fmt: skip


def _config(server: ServerProcess, name: str, **changes: Any) -> str:
    config = loopback.get(f"{server.base_url}/v2/models/simple/config", timeout=30).json()
    config["name"] = name
    config.update(changes)
    return json.dumps(config)


def _load(server: ServerProcess, name: str, parameters: dict[str, Any]) -> httpx.Response:
    return loopback.post(
        f"{server.base_url}/v2/repository/models/{name}/load",
        json={"parameters": parameters},
        timeout=60,
    )


def _sum(client: Any, module: Any, name: str) -> Any:
    inputs = []
    for tensor_name in ("INPUT0", "INPUT1"):
        tensor = module.InferInput(tensor_name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    return client.infer(name, inputs).as_numpy("OUTPUT0")


def test_a_model_sent_over_http_loads_from_a_private_copy_that_goes_away(
    explicit: ServerProcess, model_repository: Path, temporary: Path
) -> None:
    model = (model_repository / "simple" / "1" / "model.onnx").read_bytes()
    labels = "".join(f"sent-{i}\n" for i in range(16)).encode()
    config = json.loads(_config(explicit, "sent"))
    config["output"][0]["label_filename"] = "labels.txt"
    answer = _load(explicit, "sent", {
        "config": json.dumps(config),
        "file:1/model.onnx": base64.b64encode(model).decode(),
        "file:labels.txt": base64.b64encode(labels).decode(),
    })  # fmt: skip
    assert answer.status_code == 200, answer.text
    client = httpclient.InferenceServerClient(explicit.url)
    np.testing.assert_array_equal(_sum(client, httpclient, "sent"), 2 * np.arange(16)[None])
    inputs = []
    for tensor_name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(tensor_name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=1)
    top = client.infer("sent", inputs, outputs=[output]).as_numpy("OUTPUT0")
    assert str(top.ravel()[0]).endswith(":sent-15")
    client.close()
    assert not list(temporary.glob("cachefleet-load-*"))  # the staged copy went with the load


def test_a_model_sent_over_grpc_loads(explicit: ServerProcess, model_repository: Path) -> None:
    model = (model_repository / "simple" / "1" / "model.onnx").read_bytes()
    with grpcclient.InferenceServerClient(explicit.grpc_url) as client:
        client.load_model(
            "sent_grpc", config=_config(explicit, "sent_grpc"), files={"file:1/model.onnx": model}
        )
        np.testing.assert_array_equal(
            _sum(client, grpcclient, "sent_grpc"), 2 * np.arange(16)[None]
        )


@pytest.mark.parametrize(
    "path", ["../escape/model.onnx", "/tmp/escape.onnx", "1/../../escape.onnx", "1/./../../x"]
)
def test_a_file_path_out_of_the_folder_is_refused_naming_the_parameter(
    explicit: ServerProcess, tmp_path: Path, path: str
) -> None:
    answer = _load(explicit, "simple", {
        "config": _config(explicit, "simple"),
        f"file:{path}": base64.b64encode(b"not a model").decode(),
    })  # fmt: skip
    assert answer.status_code == 400
    assert f"parameter 'file:{path}'" in answer.json()["error"]
    assert not Path("/tmp/escape.onnx").exists()
    assert (
        loopback.get(f"{explicit.base_url}/v2/models/simple/ready", timeout=10).status_code == 200
    )


def test_bad_file_loads_are_refused_and_the_old_model_serves(explicit: ServerProcess) -> None:
    config = _config(explicit, "simple")
    no_config = _load(explicit, "simple", {"file:1/model.onnx": base64.b64encode(b"x").decode()})
    assert no_config.status_code == 400
    assert "need the 'config' parameter" in no_config.json()["error"]
    not_base64 = _load(explicit, "simple", {"config": config, "file:1/model.onnx": "@@@"})
    assert not_base64.status_code == 400
    big = base64.b64encode(b"\0" * (LIMIT // 2)).decode()
    too_big = _load(explicit, "simple", {"config": config, "file:1/a": big, "file:1/b": big})
    assert too_big.status_code == 413, too_big.text  # the body itself is under the limit
    garbage = _load(explicit, "simple", {
        "config": config, "file:1/model.onnx": base64.b64encode(b"not onnx").decode()
    })  # fmt: skip
    assert garbage.status_code == 400
    assert garbage.json()["error"].startswith("failed to load 'simple'")
    assert (
        loopback.get(f"{explicit.base_url}/v2/models/simple/ready", timeout=10).status_code == 200
    )


def test_file_loads_are_model_repository_calls_and_restricted_as_such(
    make_server: Callable[..., ServerProcess], model_repository: Path
) -> None:
    server = make_server(
        "--model-control-mode", "explicit", "--load-model", "simple",
        "--http-restricted-api", "model-repository:admin-key=k-1",
        "--grpc-restricted-protocol", "model-repository:admin-key=k-1",
    )  # fmt: skip
    model = (model_repository / "simple" / "1" / "model.onnx").read_bytes()
    config = json.dumps({**json.loads(_config(server, "sent")), "name": "sent"})
    refused = _load(server, "sent", {
        "config": config, "file:1/model.onnx": base64.b64encode(model).decode()
    })  # fmt: skip
    assert refused.status_code == 403
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="This protocol is restricted"):
            client.load_model("sent", config=config, files={"file:1/model.onnx": model})
        client.load_model(
            "sent",
            config=config,
            files={"file:1/model.onnx": model},
            headers={"triton-grpc-protocol-admin-key": "k-1"},
        )
        assert client.is_model_ready("sent")


def test_tritons_model_control_example_flow_over_grpc(
    make_server: Callable[..., ServerProcess], model_repository: Path, tmp_path: Path
) -> None:
    """The calls and checks of Triton's ``simple_grpc_model_control.py``, on the samples and two
    copies of ``simple``."""
    repository = tmp_path / "models"
    shutil.copytree(model_repository, repository)
    for extra in ("simple_copy_a", "simple_copy_b"):
        shutil.copytree(model_repository / "simple", repository / extra)
    models = [p for p in repository.iterdir() if p.is_dir()]
    assert len(models) == len(list(model_repository.iterdir())) + 2
    server = make_server("--model-control-mode", "explicit", repository=repository)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        assert len(client.get_model_repository_index().models) == len(models)
        client.load_model("simple")
        assert client.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as wrong_format:
            client.load_model(
                "simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}'
            )
        assert "failed to load" in str(wrong_format.value.message())
        client.load_model("simple", config='{"max_batch_size":"16"}')
        assert client.get_model_config("simple").config.max_batch_size == 16
        client.unload_model("simple")
        assert not client.is_model_ready("simple")
        with pytest.raises(InferenceServerException) as too_long:
            client.load_model("simple", config="{}", files={"file:" + "A" * 256: b"a"})
        assert too_long.value.status() == "StatusCode.INTERNAL"
        assert "failed to poll from model repository" in str(too_long.value.message())
        assert client.is_server_live()
        with pytest.raises(InferenceServerException) as wrong_name:
            client.load_model("wrong_model_name")
        assert "failed to load" in str(wrong_name.value.message())


def _raw_load(server: ServerProcess, path: str, parameters: dict[str, Any]) -> tuple[int, str]:
    """A load whose model name goes on the wire as written (an HTTP client would resolve
    ``..`` in the URL before sending it; an attacker does not)."""
    body = json.dumps({"parameters": parameters}).encode()
    head = (
        f"POST /v2/repository/models/{path}/load HTTP/1.1\r\nHost: t\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with raw_http.connect(server) as stream:
        stream.sendall(head.encode() + body)
        status, _, answer = raw_http.read(stream, bytearray())
    return status, json.loads(answer)["error"] if answer else ""


def _written_outside(tmp_path: Path, temporary: Path) -> list[Path]:
    """Every file a load may have written: anything named README under the test's folder,
    and any staged copy left in the server's temporary folder."""
    return [*tmp_path.rglob("README"), *temporary.glob("cachefleet-load-*")]


def test_a_model_name_out_of_its_folder_writes_nothing_over_grpc(
    explicit: ServerProcess, tmp_path: Path, temporary: Path
) -> None:
    """The staged copy is ``<server tmp>/cachefleet-load-*/<name>``: ``../../escaped`` would be
    ``<tmp_path>/escaped``, beside the server's temporary folder."""
    with grpcclient.InferenceServerClient(explicit.grpc_url) as client:
        for name in ("../../escaped", "../escaped", "..", ".", ".hidden", "a/b", "x" * 256):
            with pytest.raises(InferenceServerException) as refused:
                client.load_model(
                    name, config=_config(explicit, "simple"), files={"file:1/README": b"planted"}
                )
            assert _written_outside(tmp_path, temporary) == [], name
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT", name
            message = str(refused.value.message())
            assert f"failed to load '{name}': not a model name" in message
        assert client.is_model_ready("simple")


def test_a_model_name_out_of_its_folder_writes_nothing_over_http(
    explicit: ServerProcess, tmp_path: Path, temporary: Path
) -> None:
    for path in ("..", "%2E%2E", ".", "..%5C..%5Cescaped", "%0Aforged-log-line", "x" * 256):
        status, message = _raw_load(explicit, path, {
            "config": _config(explicit, "simple"),
            "file:1/README": base64.b64encode(b"planted").decode(),
        })  # fmt: skip
        assert status == 400, (path, message)
        name = urllib.parse.unquote(path)
        assert f"failed to load '{name}': not a model name" in message
        assert _written_outside(tmp_path, temporary) == [], path


def test_a_failed_load_names_the_files_as_the_client_did_not_the_servers_paths(
    explicit: ServerProcess, model_repository: Path, temporary: Path
) -> None:
    """The staged copy's path (and the repository's) stays on the server: a client learns
    which of its files failed, named inside its model's folder."""
    labelled = json.loads(_config(explicit, "simple"))
    labelled["output"][0]["label_filename"] = "labels.txt"
    model = (model_repository / "simple" / "1" / "model.onnx").read_bytes()
    answers = {
        "simple/1/model.onnx: onnxruntime cannot load it": {
            "config": _config(explicit, "simple"),
            "file:1/model.onnx": base64.b64encode(b"not onnx").decode(),
        },
        "label file of output 'OUTPUT0' ('labels.txt'): No such file or directory": {
            "config": json.dumps(labelled),
            "file:1/model.onnx": base64.b64encode(model).decode(),
        },
        "cannot write 'file:1/model.onnx'": {
            "config": _config(explicit, "simple"),
            "file:1": base64.b64encode(b"a file where a folder goes").decode(),
            "file:1/model.onnx": base64.b64encode(model).decode(),
        },
    }
    # Without files the model loads from the repository, whose path is no client's business.
    answers["label file of output 'OUTPUT0' ('labels.txt')"] = {"config": json.dumps(labelled)}
    for expected, parameters in answers.items():
        answer = _load(explicit, "simple", parameters)
        assert answer.status_code == 400, answer.text
        message = answer.json()["error"]
        assert message.startswith("failed to load 'simple': "), message
        assert expected in message, message
        for server_path in (str(temporary), "cachefleet-load-", str(model_repository), "/tmp"):
            assert server_path not in message, message
    assert not list(temporary.glob("cachefleet-load-*"))


def test_a_version_folder_that_isdigit_takes_and_int_refuses_is_a_bad_request(
    explicit: ServerProcess, model_repository: Path
) -> None:
    """``"²".isdigit()`` is true and ``int("²")`` fails: as a route's version and as a version
    folder sent in a load, it is a 400, never a 500."""
    answer = loopback.get(f"{explicit.base_url}/v2/models/simple/versions/%C2%B2", timeout=10)
    assert answer.status_code == 400, answer.text
    assert "version string '²'" in answer.json()["error"]
    model = (model_repository / "simple" / "1" / "model.onnx").read_bytes()
    with grpcclient.InferenceServerClient(explicit.grpc_url) as client:
        with pytest.raises(InferenceServerException) as refused:
            client.load_model(
                "sent", config=_config(explicit, "sent"), files={"file:²/model.onnx": model}
            )
        assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "no version folders" in str(refused.value.message())
