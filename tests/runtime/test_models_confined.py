"""Every file name a model configuration holds is checked before anything is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from cachefleet.runtime.models.config_message import new_model_config
from cachefleet.runtime.models.confined import check_names, confined_file
from cachefleet.runtime.models.errors import ModelLoadError

BAD_NAMES = ("/etc/passwd", "../x", "a/../../x", "a/..", "", "x\0y", "..\\..\\x")


@pytest.mark.parametrize("name", BAD_NAMES)
def test_each_named_file_field_refuses_a_name_out_of_the_folder(name: str) -> None:
    configs = {
        "default_model_filename": new_model_config(default_model_filename=name),
        "cc_model_filenames": new_model_config(
            default_model_filename="model.onnx", cc_model_filenames={"a100": name}
        ),
    }
    labelled = new_model_config(default_model_filename="model.onnx")
    labelled.output.add(name="OUT", label_filename=name)
    warmup = new_model_config(default_model_filename="model.onnx")
    warmup.model_warmup.add(name="w").inputs["IN"].input_data_file = name
    if name:  # an empty label or warm-up file name means "none", as in Triton
        configs["label_filename"] = labelled
        configs["input_data_file"] = warmup
    for field, config in configs.items():
        with pytest.raises(ModelLoadError, match=field):
            check_names(config)


def test_plain_and_nested_names_pass() -> None:
    config = new_model_config(default_model_filename="sub/model.onnx")
    config.output.add(name="OUT", label_filename="labels/out.txt")
    check_names(config)


def test_a_symlink_may_lead_inside_the_repository_never_out(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    model = root / "m"
    model.mkdir(parents=True)
    (root / "shared.txt").write_text("x")
    (tmp_path / "outside.txt").write_text("x")
    (model / "in.txt").symlink_to(root / "shared.txt")
    (model / "out.txt").symlink_to(tmp_path / "outside.txt")
    assert confined_file(model, "in.txt", field="f", root=root) == model / "in.txt"
    with pytest.raises(ModelLoadError, match="outside the model repository"):
        confined_file(model, "out.txt", field="f", root=root)
