"""Attacks through a model load: every file a configuration names stays inside the model folder.

As an attacker on the network would: ``--model-control-mode explicit``, then a load whose
``config`` override names a file elsewhere, then the request that would read it back.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from support.processes import ServerProcess
from tritonclient.utils import InferenceServerException

PASSWORD = "pw-that-must-never-leave-9d1e"


@pytest.fixture
def repository(model_repository: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "repo"
    copy.mkdir()
    shutil.copytree(model_repository / "simple", copy / "simple")
    (copy / "simple" / "labels.txt").write_text("".join(f"label-{i}\n" for i in range(16)))
    return copy


@pytest.fixture
def explicit(
    make_server: Callable[..., ServerProcess], repository: Path
) -> Iterator[httpclient.InferenceServerClient]:
    server = make_server(
        "--model-control-mode",
        "explicit",
        "--load-model",
        "simple",
        env={"CACHEFLEET_REDIS_PASSWORD": PASSWORD},
        repository=repository,
    )
    client = httpclient.InferenceServerClient(server.url)
    yield client
    client.close()


def _override(client: httpclient.InferenceServerClient, **changes: object) -> str:
    """simple's served config as JSON, with ``changes`` (``label_filename`` goes on OUTPUT0)."""
    config = client.get_model_config("simple")
    label = changes.pop("label_filename", None)
    if label is not None:
        config["output"][0]["label_filename"] = label
    config.update(changes)
    return json.dumps(config)


def _classify(client: httpclient.InferenceServerClient) -> list[str]:
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = httpclient.InferInput(name, [1, 16], "INT32")
        tensor.set_data_from_numpy(np.arange(16, dtype=np.int32).reshape(1, 16))
        inputs.append(tensor)
    output = httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=3)
    result = client.infer("simple", inputs, outputs=[output])
    return [str(item) for item in result.as_numpy("OUTPUT0").ravel()]


def _refused_load(client: httpclient.InferenceServerClient, config: str) -> str:
    with pytest.raises(InferenceServerException) as refused:
        client.load_model("simple", config=config)
    assert refused.value.status() == "400"
    return str(refused.value.message())


def test_a_label_file_outside_the_model_folder_is_refused_and_the_old_model_serves(
    explicit: httpclient.InferenceServerClient,
) -> None:
    before = _classify(explicit)
    for name in ("/proc/self/environ", "../../../../proc/self/environ", "1/../../simple/x"):
        message = _refused_load(explicit, _override(explicit, label_filename=name))
        assert "label_filename" in message, message
        assert "must name a file inside the model's folder" in message
        after = _classify(explicit)
        assert after == before
        assert not any(PASSWORD in item or "CACHEFLEET" in item for item in after)
    assert explicit.is_model_ready("simple")


def test_a_label_file_inside_the_model_folder_still_loads(
    explicit: httpclient.InferenceServerClient,
) -> None:
    explicit.load_model("simple", config=_override(explicit, label_filename="labels.txt"))
    assert all(":label-" in item for item in _classify(explicit))


def test_a_model_file_of_another_version_is_refused_naming_the_field(
    explicit: httpclient.InferenceServerClient,
) -> None:
    for name in ("../2/model.onnx", "/etc/passwd", "../../simple/1/model.onnx"):
        message = _refused_load(explicit, _override(explicit, default_model_filename=name))
        assert "default_model_filename" in message, message
    assert explicit.is_model_ready("simple")
    assert explicit.get_model_config("simple")["default_model_filename"] == "model.onnx"


def test_other_named_files_are_refused_naming_the_field(
    explicit: httpclient.InferenceServerClient,
) -> None:
    cc = _override(explicit, cc_model_filenames={"tesla": "/etc/passwd"})
    assert "cc_model_filenames" in _refused_load(explicit, cc)
    warmup = [
        {
            "name": "w",
            "batch_size": 1,
            "inputs": {
                "INPUT0": {
                    "data_type": "TYPE_INT32",
                    "dims": [16],
                    "input_data_file": "../../etc/passwd",
                }
            },
        }
    ]
    message = _refused_load(explicit, _override(explicit, model_warmup=warmup))
    assert "input_data_file" in message, message


def test_a_symlink_out_of_the_repository_is_not_followed(
    explicit: httpclient.InferenceServerClient, repository: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret-outside\n" * 16)
    os.symlink(outside, repository / "simple" / "escape.txt")
    message = _refused_load(explicit, _override(explicit, label_filename="escape.txt"))
    assert "label_filename" in message
    assert "outside the model repository" in message
    # A symlink that stays inside the repository is the owner's choice, and is followed.
    os.symlink(repository / "simple" / "labels.txt", repository / "simple" / "alias.txt")
    explicit.load_model("simple", config=_override(explicit, label_filename="alias.txt"))
    assert all(":label-" in item for item in _classify(explicit))
