"""The sample repository written by ``cachefleet samples``: loadable, correct, reproducible."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from cachefleet.runtime.samples.onnx_build import IR_VERSION
from cachefleet.runtime.samples.repository import write_samples

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

CPU = ["CPUExecutionProvider"]


def session(repository: Path, model: str) -> ort.InferenceSession:
    return ort.InferenceSession(str(repository / model / "1" / "model.onnx"), providers=CPU)


def test_repository_has_triton_layout_with_caching_enabled(model_repository: Path) -> None:
    models = ("simple", "simple_string", "simple_int8", "simple_identity", "densenet_onnx")
    for model in (*models, "densenet_batch"):
        config = (model_repository / model / "config.pbtxt").read_text()
        assert f'name: "{model}"' in config
        assert "response_cache { enable: true }" in config
        loaded = onnx.load(str(model_repository / model / "1" / "model.onnx"))
        assert loaded.ir_version == IR_VERSION <= 13


def test_densenet_batch_is_densenet_onnx_with_a_batch_dimension(model_repository: Path) -> None:
    """Same weights, same bits per image; ``densenet_batch`` takes several images at once."""
    config = (model_repository / "densenet_batch" / "config.pbtxt").read_text()
    assert "max_batch_size: 8" in config
    assert "dynamic_batching {" in config
    assert '"cachefleet.row_cache"' in config
    images = np.random.default_rng(3).standard_normal((2, 3, 224, 224), dtype=np.float32)
    (batched,) = session(model_repository, "densenet_batch").run(None, {"data_0": images})
    assert batched.shape == (2, 1000, 1, 1)
    single = session(model_repository, "densenet_onnx")
    for index in range(2):
        (alone,) = single.run(None, {"data_0": images[index]})
        assert alone.tobytes() == batched[index].tobytes()


def test_simple_adds_and_subtracts(model_repository: Path) -> None:
    rng = np.random.default_rng(7)
    a = rng.integers(-1000, 1000, (3, 16), dtype=np.int32)
    b = rng.integers(-1000, 1000, (3, 16), dtype=np.int32)
    total, difference = session(model_repository, "simple").run(None, {"INPUT0": a, "INPUT1": b})
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    assert total.dtype == np.int32


def test_simple_string_computes_on_decimal_strings(model_repository: Path) -> None:
    a = np.arange(-8, 8, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 5, dtype=np.int32)
    as_text = np.vectorize(str, otypes=[object])
    total, difference = session(model_repository, "simple_string").run(
        None, {"INPUT0": as_text(a), "INPUT1": as_text(b)}
    )
    assert total.tolist() == as_text(a + b).tolist()
    assert difference.tolist() == as_text(a - b).tolist()


def test_simple_int8_wraps_around_like_numpy(model_repository: Path) -> None:
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (2, 16), dtype=np.int8)
    b = rng.integers(-128, 128, (2, 16), dtype=np.int8)
    total, difference = session(model_repository, "simple_int8").run(
        None, {"INPUT0": a, "INPUT1": b}
    )
    np.testing.assert_array_equal(total, a + b)
    np.testing.assert_array_equal(difference, a - b)
    assert total.dtype == np.int8


def test_simple_identity_returns_strings_unchanged(model_repository: Path) -> None:
    """Any width, NUL characters included (Triton's string example sends "he\\x00llo")."""
    strings = np.array([["he\x00llo", "\x00\x01\x02\x03", ""]], dtype=object)
    (same,) = session(model_repository, "simple_identity").run(None, {"INPUT0": strings})
    assert same.tolist() == strings.tolist()


def test_densenet_serves_triton_shapes_with_labels(model_repository: Path) -> None:
    model = session(model_repository, "densenet_onnx")
    assert [(i.name, i.shape) for i in model.get_inputs()] == [("data_0", [3, 224, 224])]
    assert [(o.name, o.shape) for o in model.get_outputs()] == [("fc6_1", [1000, 1, 1])]
    labels = (model_repository / "densenet_onnx" / "densenet_labels.txt").read_text().splitlines()
    assert len(labels) == 1000


def test_densenet_outputs_are_finite_and_depend_on_the_input(model_repository: Path) -> None:
    model = session(model_repository, "densenet_onnx")
    rng = np.random.default_rng(0)
    first, second = (rng.standard_normal((3, 224, 224), dtype=np.float32) for _ in range(2))
    (out1,) = model.run(None, {"data_0": first})
    (out2,) = model.run(None, {"data_0": second})
    assert out1.shape == (1000, 1, 1)
    assert np.isfinite(out1).all()
    assert out1.std() > 0.01, "outputs are (nearly) all equal"
    assert not np.allclose(out1, out2)


def test_densenet_is_byte_identical_across_generations(
    model_repository: Path, tmp_path: Path
) -> None:
    """The fixture ran in another process; generating again here must give the same bytes."""
    write_samples(tmp_path, ("densenet_onnx",))
    ours = tmp_path / "densenet_onnx"
    theirs = model_repository / "densenet_onnx"
    for relative in ("1/model.onnx", "config.pbtxt", "densenet_labels.txt"):
        assert (ours / relative).read_bytes() == (theirs / relative).read_bytes(), relative
    x = np.random.default_rng(3).standard_normal((3, 224, 224), dtype=np.float32)
    (out_ours,) = session(tmp_path, "densenet_onnx").run(None, {"data_0": x})
    (out_theirs,) = session(model_repository, "densenet_onnx").run(None, {"data_0": x})
    assert out_ours.tobytes() == out_theirs.tobytes()


def test_unknown_sample_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="nope"):
        write_samples(tmp_path, ("nope",))
