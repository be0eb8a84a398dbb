"""Loading a Triton-layout repository: config.pbtxt, version policies, derived configs, failures."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.errors import ModelNotFoundError
from cachefleet.runtime.models.config import parse_config
from cachefleet.runtime.models.repository import LocalModelRepository, load_repository
from cachefleet.runtime.samples.onnx_build import make_model
from cachefleet.runtime.tensor import Tensor

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

SIMPLE_TENSORS = """
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
"""


def simple_config(name: str = "adder", extra: str = "", tensors: str = SIMPLE_TENSORS) -> str:
    return f'name: "{name}"\nplatform: "onnxruntime_onnx"\nmax_batch_size: 8\n{tensors}\n{extra}'


@dataclass
class RepositoryBuilder:
    """A temp repository filled with copies of the sample models."""

    root: Path
    samples: Path

    def add(
        self,
        name: str,
        config: str | None,
        versions: tuple[int, ...] = (1,),
        sample: str = "simple",
    ) -> Path:
        folder = self.root / name
        for version in versions:
            (folder / str(version)).mkdir(parents=True)
            source = self.samples / sample / "1" / "model.onnx"
            shutil.copyfile(source, folder / str(version) / "model.onnx")
        if config is not None:
            (folder / "config.pbtxt").write_text(config)
        return folder


@pytest.fixture
def repo(model_repository: Path, tmp_path: Path) -> RepositoryBuilder:
    (tmp_path / "repo").mkdir()
    return RepositoryBuilder(tmp_path / "repo", model_repository)


def load(root: Path) -> LocalModelRepository:
    return load_repository(root, ModelSettings(execution_provider="cpu"))


def states(repository: LocalModelRepository) -> dict[tuple[str, str], str]:
    return {(entry.name, entry.version): entry.state for entry in repository.index()}


def reason(repository: LocalModelRepository, name: str) -> str:
    return " ".join(entry.reason for entry in repository.index() if entry.name == name)


def add_sub(repository: LocalModelRepository, name: str, version: str | None = None) -> None:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 2, dtype=np.int32)
    total, difference = repository.get(name, version).run(
        [Tensor.from_numpy("INPUT0", a), Tensor.from_numpy("INPUT1", b)]
    )
    np.testing.assert_array_equal(total.to_numpy(), a + b)
    np.testing.assert_array_equal(difference.to_numpy(), a - b)


def test_sample_configs_map_onto_model_config(model_repository: Path) -> None:
    repository = load(model_repository)
    assert set(states(repository).values()) == {"READY"}
    simple = repository.get("simple").config
    assert (simple.max_batch_size, simple.response_cache, simple.cache_ttl_s) == (8, True, None)
    assert [(s.name, s.datatype, s.dims) for s in simple.inputs] == [
        ("INPUT0", "INT32", (16,)),
        ("INPUT1", "INT32", (16,)),
    ]
    assert [s.datatype for s in repository.get("simple_string").config.outputs] == ["BYTES"] * 2
    densenet = repository.get("densenet_onnx")
    assert densenet.config.output("fc6_1").dims == (1000, 1, 1)  # type: ignore[union-attr]
    assert len(densenet.labels["fc6_1"]) == 1000


def test_config_document_is_tritons_json(model_repository: Path) -> None:
    document = load(model_repository).get("simple").config.document
    assert document["name"] == "simple"
    assert document["platform"] == "onnxruntime_onnx"
    assert document["backend"] == "onnxruntime"
    assert document["max_batch_size"] == 8
    assert document["version_policy"] == {"latest": {"num_versions": 1}}
    assert document["input"][0]["data_type"] == "TYPE_INT32"
    assert document["input"][0]["dims"] == [16]
    assert document["response_cache"] == {"enable": True}


def test_fields_we_ignore_still_parse_and_are_logged(
    repo: RepositoryBuilder, caplog: pytest.LogCaptureFixture
) -> None:
    extra = """
    instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0 ] } ]
    dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }
    model_warmup [ { name: "w" batch_size: 1 inputs { key: "INPUT0" value { zero_data: true } } } ]
    parameters { key: "cache_ttl" value { string_value: "10m" } }
    """
    repo.add("adder", simple_config(extra=extra))
    with caplog.at_level(logging.INFO):
        repository = load(repo.root)
    assert states(repository) == {("adder", "1"): "READY"}
    config = repository.get("adder").config
    assert config.cache_ttl_s == 600
    assert config.document["instance_group"][0]["count"] == 2
    assert config.document["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    # dynamic_batching is acted on (the dynamic batcher), so only model_warmup is reported.
    assert "not acted on: model_warmup" in caplog.text
    add_sub(repository, "adder")


def test_a_field_unknown_to_tritons_schema_makes_the_model_unavailable_naming_it(
    repo: RepositoryBuilder,
) -> None:
    repo.add("adder", simple_config(extra="some_future_field { nested { deeper: 1 } }"))
    repo.add("other", simple_config(name="other"))
    repository = load(repo.root)
    assert states(repository) == {("adder", ""): "UNAVAILABLE", ("other", "1"): "READY"}
    assert "some_future_field" in reason(repository, "adder")


def test_config_is_tritons_own_model_config_message(repo: RepositoryBuilder) -> None:
    """Parsed into tritonclient's generated ModelConfig: no schema of our own to drift."""
    from tritonclient.grpc import model_config_pb2

    message = parse_config(simple_config(), source="adder/config.pbtxt")
    assert isinstance(message, model_config_pb2.ModelConfig)
    assert [item.name for item in message.input] == ["INPUT0", "INPUT1"]


def test_config_document_writes_64_bit_integers_as_numbers(repo: RepositoryBuilder) -> None:
    """Triton's JSON has numbers where protobuf's JSON mapping has strings (int64, uint64)."""
    extra = """
    version_policy { specific { versions: [ 1 ] } }
    dynamic_batching {
      max_queue_delay_microseconds: 250
      priority_queue_policy { key: 2 value { default_timeout_microseconds: 7 } }
    }
    """
    repo.add("adder", simple_config(extra=extra))
    document = load(repo.root).get("adder").config.document
    assert document["version_policy"] == {"specific": {"versions": [1]}}
    assert document["input"][0]["dims"] == [16]
    batching = document["dynamic_batching"]
    assert batching["max_queue_delay_microseconds"] == 250
    assert batching["priority_queue_policy"]["2"]["default_timeout_microseconds"] == 7
    assert batching["preserve_ordering"] is False


@pytest.mark.parametrize(("ttl", "seconds"), [("90", 90.0), ("1h30m", 5400.0)])
def test_cache_ttl_parameter_takes_seconds_or_durations(
    repo: RepositoryBuilder, ttl: str, seconds: float
) -> None:
    extra = f'parameters {{ key: "cache_ttl" value {{ string_value: "{ttl}" }} }}'
    repo.add("adder", simple_config(extra=extra))
    assert load(repo.root).get("adder").config.cache_ttl_s == seconds


@pytest.mark.parametrize(
    ("policy", "loaded", "latest"),
    [
        ("", ["3"], "3"),
        ("version_policy { latest { num_versions: 2 } }", ["2", "3"], "3"),
        ("version_policy { all {} }", ["1", "2", "3"], "3"),
        ("version_policy { specific { versions: [ 1, 2 ] } }", ["1", "2"], "2"),
    ],
)
def test_version_policies(
    repo: RepositoryBuilder, policy: str, loaded: list[str], latest: str
) -> None:
    repo.add("adder", simple_config(extra=policy), versions=(1, 2, 3))
    (repo.root / "adder" / "not_a_version").mkdir()
    repository = load(repo.root)
    assert repository.versions("adder") == loaded
    assert repository.get("adder").version == latest
    for version in loaded:
        add_sub(repository, "adder", version)


def test_specific_version_missing_on_disk_is_unavailable(repo: RepositoryBuilder) -> None:
    repo.add("adder", simple_config(extra="version_policy { specific { versions: [1, 4] } }"))
    repository = load(repo.root)
    assert states(repository) == {("adder", "1"): "READY", ("adder", "4"): "UNAVAILABLE"}
    with pytest.raises(ModelNotFoundError, match="version 4 is not available"):
        repository.get("adder", "4")


def test_missing_config_is_derived_from_the_graph(repo: RepositoryBuilder) -> None:
    repo.add("derived", None)
    repo.add("derived_strings", None, sample="simple_string")
    repository = load(repo.root)
    config = repository.get("derived").config
    assert config.name == "derived"
    assert config.max_batch_size == 4, "a free first dimension everywhere means batching"
    assert [(s.name, s.datatype, s.dims) for s in config.inputs + config.outputs] == [
        ("INPUT0", "INT32", (16,)),
        ("INPUT1", "INT32", (16,)),
        ("OUTPUT0", "INT32", (16,)),
        ("OUTPUT1", "INT32", (16,)),
    ]
    assert config.response_cache is False
    assert config.document["input"][0]["data_type"] == "TYPE_INT32"
    strings = repository.get("derived_strings").config
    assert {s.datatype for s in strings.inputs + strings.outputs} == {"BYTES"}
    add_sub(repository, "derived")


def test_config_without_outputs_gets_them_from_the_graph(repo: RepositoryBuilder) -> None:
    inputs_only = SIMPLE_TENSORS[: SIMPLE_TENSORS.index("output [")]
    repo.add("adder", simple_config(tensors=inputs_only))
    config = load(repo.root).get("adder").config
    assert config.max_batch_size == 8
    assert [(s.name, s.dims) for s in config.outputs] == [("OUTPUT0", (16,)), ("OUTPUT1", (16,))]


def test_derived_config_without_batch_dimension(model_repository: Path, tmp_path: Path) -> None:
    folder = tmp_path / "dense" / "1"
    folder.mkdir(parents=True)
    shutil.copyfile(model_repository / "densenet_onnx" / "1" / "model.onnx", folder / "model.onnx")
    config = load(tmp_path).get("dense").config
    assert config.max_batch_size == 0
    assert config.inputs[0].dims == (3, 224, 224)


def test_broken_model_is_unavailable_while_others_serve(repo: RepositoryBuilder) -> None:
    repo.add("adder", simple_config())
    broken = repo.add("broken", simple_config(name="broken"))
    (broken / "1" / "model.onnx").write_bytes(b"not an onnx model")
    repository = load(repo.root)
    assert states(repository) == {("adder", "1"): "READY", ("broken", "1"): "UNAVAILABLE"}
    assert "onnxruntime cannot load it" in reason(repository, "broken")
    add_sub(repository, "adder")
    with pytest.raises(ModelNotFoundError, match="'broken' is not available"):
        repository.get("broken")


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (simple_config(name="other"), "config name 'other' does not match its folder 'adder'"),
        (simple_config().replace("onnxruntime_onnx", "tensorflow_savedmodel"), "not served"),
        (simple_config().replace('"INPUT1" data_type: TYPE_INT32', '"INPUT1" data_type: TYPE_FP32'),
         "the config says TYPE_FP32 but the model has tensor(int32)"),
        (simple_config().replace('"INPUT1"', '"INPUT9"'), "'INPUT9' is not an input of the model"),
        (simple_config().replace("dims: [ 16 ] },\n  { name: \"INPUT1\"",
                                 "dims: [ 15 ] },\n  { name: \"INPUT1\""), "does not fit"),
        (simple_config(extra='parameters { key: "cache_ttl" value { string_value: "soon" } }'),
         "cache_ttl"),
        (simple_config(extra="input_typo: 3 max_batch_size: oops"), "config.pbtxt"),
        (simple_config(extra='output [ { name: "x" label_filename: "a.txt" } ]'), "TYPE_INVALID"),
    ],
)  # fmt: skip
def test_bad_configs_make_the_model_unavailable(
    repo: RepositoryBuilder, config: str, message: str
) -> None:
    repo.add("adder", config)
    repo.add("good", simple_config(name="good"))
    repository = load(repo.root)
    assert reason(repository, "adder")
    assert message in reason(repository, "adder")
    assert states(repository)[("good", "1")] == "READY"


def test_missing_label_file_is_a_reason(repo: RepositoryBuilder) -> None:
    config = simple_config(
        tensors=SIMPLE_TENSORS.replace(
            '"OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ]',
            '"OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] label_filename: "labels.txt"',
        )
    )
    repo.add("adder", config)
    assert "labels.txt" in reason(load(repo.root), "adder")
    (repo.root / "adder" / "labels.txt").write_text("zero\none\n")
    assert load(repo.root).get("adder").labels == {"OUTPUT1": ["zero", "one"]}


def test_reshape_serves_config_dims_over_model_shape(repo: RepositoryBuilder) -> None:
    tensors = SIMPLE_TENSORS.replace("dims: [ 16 ]", "dims: [ 4, 4 ] reshape: { shape: [ 16 ] }")
    repo.add("adder", simple_config(tensors=tensors))
    model = load(repo.root).get("adder")
    a = np.arange(32, dtype=np.int32).reshape(2, 4, 4)
    total, _ = model.run([Tensor.from_numpy("INPUT0", a), Tensor.from_numpy("INPUT1", a)])
    assert total.shape == (2, 4, 4)
    np.testing.assert_array_equal(total.to_numpy(), a * 2)
    # A shape that cannot take the reshape is refused while decoding, before the cache and
    # the model: tests/runtime/test_protocol_decode.py.


def test_unknown_model_and_version_are_not_found(model_repository: Path) -> None:
    repository = load(model_repository)
    with pytest.raises(ModelNotFoundError, match="unknown model 'nope'") as error:
        repository.get("nope")
    assert error.value.status_code == 404
    with pytest.raises(ModelNotFoundError, match=r"unknown version '7' of model 'simple'"):
        repository.get("simple", "7")
    with pytest.raises(ModelNotFoundError):
        repository.versions("nope")


def test_repository_that_is_not_a_folder_fails_loudly(tmp_path: Path) -> None:
    from cachefleet.runtime.models.errors import ModelLoadError

    with pytest.raises(ModelLoadError, match="not a directory"):
        load(tmp_path / "absent")


def test_tritons_reshape_style_without_batching(tmp_path: Path) -> None:
    """Triton's own densenet_onnx config: dims without the model's leading 1, via reshape."""
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Unsqueeze", ["r", "axes"], ["y"]),
        ],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 1])],
        initializer=[numpy_helper.from_array(np.array([2], dtype=np.int64), "axes")],
    )
    (tmp_path / "relu" / "1").mkdir(parents=True)
    (tmp_path / "relu" / "1" / "model.onnx").write_bytes(make_model(graph).SerializeToString())
    (tmp_path / "relu" / "config.pbtxt").write_text(
        'platform: "onnxruntime_onnx"\nmax_batch_size: 0\n'
        'input [{ name: "x" data_type: TYPE_FP32 dims: [4] reshape: { shape: [1, 4] } }]\n'
        'output [{ name: "y" data_type: TYPE_FP32 dims: [4] reshape: { shape: [1, 4, 1] } }]\n'
    )
    model = load(tmp_path).get("relu")
    (y,) = model.run([Tensor.from_numpy("x", np.array([-1, 2, -3, 4], dtype=np.float32))])
    assert y.shape == (4,)
    assert y.to_numpy().tolist() == [0, 2, 0, 4]


def test_fixed_batch_of_one_serves_max_batch_size_one(tmp_path: Path) -> None:
    """Triton's current densenet_onnx config: max_batch_size 1 over a model fixed at batch 1."""
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])],
        "neg",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    (tmp_path / "neg" / "1").mkdir(parents=True)
    (tmp_path / "neg" / "1" / "model.onnx").write_bytes(make_model(graph).SerializeToString())
    config = (
        'platform: "onnxruntime_onnx"\nmax_batch_size: {}\n'
        'input [{{ name: "x" data_type: TYPE_FP32 dims: [4] }}]\n'
        'output [{{ name: "y" data_type: TYPE_FP32 dims: [2, 2] reshape {{ shape: [4] }} }}]\n'
    )
    (tmp_path / "neg" / "config.pbtxt").write_text(config.format(1))
    model = load(tmp_path).get("neg")
    (y,) = model.run([Tensor.from_numpy("x", np.ones((1, 4), dtype=np.float32))])
    assert (y.shape, y.to_numpy().tolist()) == ((1, 2, 2), [[[-1, -1], [-1, -1]]])
    (tmp_path / "neg" / "config.pbtxt").write_text(config.format(2))
    assert "not a free batch dimension" in reason(load(tmp_path), "neg")
