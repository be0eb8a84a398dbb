"""``--model-name``: a repository that is one model's files, as KServe's storage initializer
leaves them, served under the given name (real ONNX Runtime on the sample model)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.repository import READY, UNAVAILABLE, load_repository
from cachefleet.runtime.models.types import ModelIndexEntry


@pytest.fixture
def sample(model_repository: Path) -> Path:
    """The sample ``simple`` model's folder (config.pbtxt and 1/model.onnx)."""
    return model_repository / "simple"


def bare(sample: Path, folder: Path, *, config: bool = False) -> Path:
    folder.mkdir()
    shutil.copy(sample / "1" / "model.onnx", folder / "model.onnx")
    if config:
        shutil.copy(sample / "config.pbtxt", folder / "config.pbtxt")
    return folder


def states(index: list[ModelIndexEntry]) -> list[tuple[str, str, str]]:
    return [(entry.name, entry.version, entry.state) for entry in index]


def test_bare_model_file_is_version_one_of_the_named_model(sample: Path, tmp_path: Path) -> None:
    models = bare(sample, tmp_path / "models")
    repository = load_repository(models, ModelSettings(name="my-model"))
    assert states(repository.index()) == [("my-model", "1", READY)]
    assert repository.names() == ["my-model"]
    model = repository.get("my-model")
    assert model.config.name == "my-model"
    assert [spec.name for spec in model.config.inputs] == ["INPUT0", "INPUT1"]


def test_bare_model_reloads_from_the_same_folder(sample: Path, tmp_path: Path) -> None:
    models = bare(sample, tmp_path / "models")
    repository = load_repository(models, ModelSettings(name="m"))
    before = repository.get("m")
    repository.load("m")
    assert repository.get("m") is not before
    assert states(repository.index()) == [("m", "1", READY)]


def test_config_beside_the_bare_file_is_read_and_must_carry_the_name(
    sample: Path, tmp_path: Path
) -> None:
    models = bare(sample, tmp_path / "models", config=True)
    served = load_repository(models, ModelSettings(name="simple"))
    assert served.get("simple").config.response_cache
    other = load_repository(models, ModelSettings(name="other"))
    [entry] = other.index()
    assert entry.state == UNAVAILABLE
    assert "does not match" in entry.reason


def test_version_folders_of_one_model_keep_their_versions(sample: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(sample, models)
    (models / "config.pbtxt").write_text(
        (models / "config.pbtxt").read_text().replace('"simple"', '"kserve-name"')
    )
    repository = load_repository(models, ModelSettings(name="kserve-name"))
    assert states(repository.index()) == [("kserve-name", "1", READY)]


def test_repository_of_model_folders_ignores_the_name(sample: Path, tmp_path: Path) -> None:
    models = tmp_path / "models"
    shutil.copytree(sample, models / "simple")
    repository = load_repository(models, ModelSettings(name="ignored"))
    assert states(repository.index()) == [("simple", "1", READY)]


def test_a_symlink_out_of_the_one_model_folder_is_not_followed(
    sample: Path, tmp_path: Path
) -> None:
    # The folder is the whole repository: its parent is none of the model's business.
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(sample / "1" / "model.onnx", tmp_path / "elsewhere.onnx")
    (models / "model.onnx").symlink_to(tmp_path / "elsewhere.onnx")
    [entry] = load_repository(models, ModelSettings(name="m")).index()
    assert entry.state == UNAVAILABLE
    assert "outside the model repository" in entry.reason


def test_a_name_that_is_no_folder_name_is_refused(sample: Path, tmp_path: Path) -> None:
    models = bare(sample, tmp_path / "models")
    with pytest.raises(ModelLoadError, match="not a model name"):
        load_repository(models, ModelSettings(name="../x"))
