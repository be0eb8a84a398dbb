"""A model version's fingerprint covers its effective config and every file that decides its
answers, external data and label files included, and nothing process-local."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.models.repository import LocalModelRepository, load_repository
from cachefleet.runtime.samples.onnx_build import make_model
from cachefleet.runtime.tensor import Tensor

CONFIG = """
name: "offset"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ 4 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 4 ], label_filename: "labels.txt" } ]
"""


def write_offset_model(folder: Path, weights: list[float]) -> None:
    """``offset``: Y = X + W, with W in ONNX external data (``1/model.onnx.data``)."""
    version = folder / "offset" / "1"
    version.mkdir(parents=True, exist_ok=True)
    weight = numpy_helper.from_array(np.array(weights, dtype=np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "offset",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [4])],
        initializer=[weight],
    )
    onnx.save_model(
        make_model(graph),
        str(version / "model.onnx"),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="model.onnx.data",
        size_threshold=0,
    )
    (folder / "offset" / "config.pbtxt").write_text(CONFIG)
    (folder / "offset" / "labels.txt").write_text("a\nb\nc\nd\n")


def load(folder: Path) -> LocalModelRepository:
    return load_repository(folder, ModelSettings(execution_provider="cpu"))


def fingerprint(folder: Path) -> str:
    return load(folder).get("offset").fingerprint


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    write_offset_model(tmp_path / "repo", [1, 2, 3, 4])
    return tmp_path / "repo"


def test_same_files_give_the_same_fingerprint_anywhere(folder: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    first = fingerprint(folder)
    assert len(first) == 64
    assert int(first, 16) >= 0
    assert fingerprint(folder) == first  # another load, another process state
    assert fingerprint(copy) == first  # another path


def test_changing_only_the_external_data_changes_the_fingerprint_and_the_answer(
    folder: Path,
) -> None:
    before = load(folder).get("offset")
    model_file = folder / "offset" / "1" / "model.onnx"
    graph_bytes = model_file.read_bytes()
    data = folder / "offset" / "1" / "model.onnx.data"
    # Replaced, not rewritten in place: ONNX Runtime maps external data into memory, so bytes
    # written into the same file would change the running session's weights under it too.
    new = data.with_suffix(".new")
    new.write_bytes(np.array([10, 20, 30, 40], dtype=np.float32).tobytes())
    new.replace(data)
    after = load(folder).get("offset")
    assert model_file.read_bytes() == graph_bytes  # the model file itself is unchanged
    assert after.fingerprint != before.fingerprint
    inputs = [Tensor.from_numpy("X", np.zeros(4, dtype=np.float32))]
    assert before.run(inputs)[0].to_numpy().tolist() == [1, 2, 3, 4]
    assert after.run(inputs)[0].to_numpy().tolist() == [10, 20, 30, 40]


def test_changing_only_a_label_file_changes_the_fingerprint(folder: Path) -> None:
    before = fingerprint(folder)
    (folder / "offset" / "labels.txt").write_text("a\nb\nc\nchanged\n")
    assert fingerprint(folder) != before


def test_the_effective_config_is_part_of_the_fingerprint(folder: Path) -> None:
    before = fingerprint(folder)
    config = folder / "offset" / "config.pbtxt"
    config.write_text(CONFIG + 'parameters { key: "x" value: { string_value: "1" } }\n')
    changed = fingerprint(folder)
    assert changed != before
    # A comment changes the file, not the effective config: the same fingerprint.
    config.write_text("# a comment\n" + config.read_text())
    assert fingerprint(folder) == changed
    # A load override is the effective config too.
    repository = load(folder)
    repository.load("offset", '{"name": "offset", "max_batch_size": 0}')
    assert repository.get("offset").fingerprint not in (before, changed)


def test_any_new_file_in_the_version_folder_changes_the_fingerprint(folder: Path) -> None:
    before = fingerprint(folder)
    (folder / "offset" / "1" / "extra.bin").write_bytes(b"\0")
    assert fingerprint(folder) != before


def test_linked_folders_are_hashed_and_a_link_loop_ends(folder: Path, tmp_path: Path) -> None:
    before = fingerprint(folder)
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "weights.bin").write_bytes(b"1")
    (folder / "offset" / "1" / "shared").symlink_to(shared, target_is_directory=True)
    (shared / "loop").symlink_to(shared, target_is_directory=True)
    linked = fingerprint(folder)
    assert linked != before
    (shared / "weights.bin").write_bytes(b"2")
    assert fingerprint(folder) != linked
