"""Decoding requests: JSON and binary give identical tensors; each malformed request is a 400
whose message names the problem."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import orjson
import pytest
from support.protocol_models import (
    IMAGE,
    SIMPLE,
    STRINGS,
    json_body,
    simple_inputs,
    triton_body,
)

from cachefleet.runtime.errors import BadRequestError
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import decode_request
from cachefleet.runtime.protocol.json_data import tensor_from_json
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.tensor import encode_bytes_elements


def _decode_both(
    model: ModelConfig, inputs: dict[str, np.ndarray], datatypes: dict[str, str]
) -> list[InferRequest]:
    decoded = []
    for binary in (False, True):
        body, length = triton_body(inputs, datatypes, binary=binary)
        assert (length is not None) == binary
        decoded.append(decode_request(body, length, model))
    return decoded


def test_int32_json_and_binary_give_identical_tensors() -> None:
    as_json, as_binary = _decode_both(
        SIMPLE, simple_inputs(2), {"INPUT0": "INT32", "INPUT1": "INT32"}
    )
    assert as_json.inputs == as_binary.inputs
    first = as_json.inputs[0]
    assert (first.name, first.datatype, first.shape) == ("INPUT0", "INT32", (2, 16))
    assert first.data == np.arange(32, dtype="<i4").tobytes()


def test_fp32_json_and_binary_give_identical_tensors() -> None:
    image = np.random.default_rng(7).standard_normal((3, 4, 5)).astype(np.float32)
    as_json, as_binary = _decode_both(IMAGE, {"data_0": image}, {"data_0": "FP32"})
    assert as_json.inputs == as_binary.inputs
    assert as_json.inputs[0].data == image.astype("<f4").tobytes()


def test_bytes_json_and_binary_give_identical_tensors() -> None:
    words = np.array([[f"word-{i}".encode() for i in range(16)]], dtype=np.object_)
    as_json, as_binary = _decode_both(
        STRINGS, {"INPUT0": words, "INPUT1": words}, {"INPUT0": "BYTES", "INPUT1": "BYTES"}
    )
    assert as_json.inputs == as_binary.inputs
    assert as_json.inputs[0].data == encode_bytes_elements([f"word-{i}" for i in range(16)])


def test_nested_json_data_is_accepted() -> None:
    body = json_body({"inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [2, 16], "data": [list(range(16))] * 2},
        {"name": "INPUT1", "datatype": "INT32", "shape": [2, 16], "data": [1] * 32},
    ]})  # fmt: skip
    request = decode_request(body, None, SIMPLE)
    assert request.inputs[0].to_numpy().tolist() == [list(range(16))] * 2


def test_request_fields_are_kept() -> None:
    body = json_body({
        "id": "req-1",
        "parameters": {"binary_data_output": True, "cache": False, "custom": 3},
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [0] * 16},
        ],
        "outputs": [{"name": "OUTPUT1", "parameters": {"binary_data": False}}],
    })  # fmt: skip
    request = decode_request(body, None, SIMPLE)
    assert request.id == "req-1"
    assert request.binary_output is True
    assert not request.use_cache
    assert request.keyed_parameters() == {"custom": 3}
    assert [(o.name, o.binary, o.classification) for o in request.outputs] == [
        ("OUTPUT1", False, 0)
    ]


def _simple_json(**overrides: object) -> dict[str, object]:
    first: dict[str, object] = {
        "name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16)),
    }  # fmt: skip
    second = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
    first.update(overrides)
    return {"inputs": [first, second]}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (_simple_json(name="INPUT9"), "unknown input 'INPUT9' for model 'simple'"),
        (_simple_json(datatype="FP32"), "datatype 'FP32' does not match the model's INT32"),
        (_simple_json(shape=[1, 15]), "shape [1, 15] does not match the model's [-1, 16]"),
        (_simple_json(shape=[16]), "shape [16] does not match"),
        (_simple_json(shape=[9, 16], data=[0] * 144), "batch size 9 must be between 1 and 8"),
        (_simple_json(data=[1] * 15), "shape [1, 16] needs 16 elements, 'data' has 15"),
        (_simple_json(data=[0.5] * 16), "floating-point numbers, which INT32 cannot hold"),
        (_simple_json(data=["a"] * 16), "strings, which INT32 cannot hold"),
        (_simple_json(data=[2**40] * 16), "out of range for INT32"),
        (_simple_json(data=["1"] * 16), "strings, which INT32 cannot hold"),
        (_simple_json(data=[True] * 16), "booleans, which INT32 cannot hold"),
        (_simple_json(data=[1] * 15 + [False]), "booleans, which INT32 cannot hold"),
        (_simple_json(data=[[1] * 15 + [True]]), "booleans, which INT32 cannot hold"),
        (_simple_json(data="nope"), "'data' must be a JSON array"),
        ({"inputs": [_simple_json()["inputs"][0]]}, "missing input 'INPUT1'"),  # type: ignore[index]
        ({"inputs": []}, "non-empty 'inputs'"),
        ({"inputs": _simple_json()["inputs"] * 2}, "input 'INPUT0' appears more than once"),  # type: ignore[operator]
        (
            _simple_json(parameters={"shared_memory_region": "r"}),
            "shared memory is not supported",
        ),
        (
            {**_simple_json(), "outputs": [{"name": "OUT"}]},
            "unknown output 'OUT' for model 'simple'",
        ),
        ({**_simple_json(), "id": 5}, "'id' must be a string"),
    ],
)
def test_invalid_json_requests_say_what_is_wrong(document: dict[str, object], message: str) -> None:
    with pytest.raises(BadRequestError) as raised:
        decode_request(json_body(document), None, SIMPLE)
    assert message in raised.value.message
    assert raised.value.status_code == 400


@pytest.mark.parametrize(
    ("datatype", "data", "refused"),
    [
        ("FP32", [0.5, True], "booleans, which FP32 cannot hold"),
        ("FP16", [[0.5], [False]], "booleans, which FP16 cannot hold"),
        ("UINT8", [1, True], "booleans, which UINT8 cannot hold"),
        ("BOOL", [True, 1], "integers, which BOOL cannot hold"),
        ("BOOL", [[1.0], [0.0]], "floating-point numbers, which BOOL cannot hold"),
    ],
)
def test_json_booleans_only_in_bool_and_only_booleans_there(
    datatype: str, data: list[object], refused: str
) -> None:
    """As Triton reads JSON: ``true`` is no number, and a number is no boolean."""
    with pytest.raises(BadRequestError, match=refused):
        tensor_from_json("x", datatype, (2,), data)
    assert tensor_from_json("x", "BOOL", (2,), [True, False]).data == b"\x01\x00"


def test_malformed_json_is_a_bad_request() -> None:
    with pytest.raises(BadRequestError, match="malformed JSON"):
        decode_request(b'{"inputs": [', None, SIMPLE)


def test_inconsistent_batch_sizes_are_rejected() -> None:
    document = _simple_json(shape=[2, 16], data=[0] * 32)
    with pytest.raises(BadRequestError, match="different batch sizes"):
        decode_request(json_body(document), None, SIMPLE)


def test_binary_byte_count_must_match_the_shape() -> None:
    def binary_input(name: str, size: int) -> dict[str, object]:
        parameters = {"binary_data_size": size}
        return {"name": name, "datatype": "INT32", "shape": [1, 16], "parameters": parameters}

    header = json_body({"inputs": [binary_input("INPUT0", 60), binary_input("INPUT1", 64)]})
    body = header + bytes(124)
    with pytest.raises(
        BadRequestError, match=r"INT32\[1, 16\] needs 64 bytes, binary_data_size is 60"
    ):
        decode_request(body, len(header), SIMPLE)


def test_truncated_binary_body_is_rejected() -> None:
    body, length = triton_body(simple_inputs(), {"INPUT0": "INT32", "INPUT1": "INT32"}, binary=True)
    assert length is not None
    with pytest.raises(BadRequestError, match="truncated body"):
        decode_request(body[:-10], length, SIMPLE)
    with pytest.raises(BadRequestError, match="Inference-Header-Content-Length is"):
        decode_request(body[: length - 5], length, SIMPLE)


def test_extra_binary_bytes_are_rejected() -> None:
    body, length = triton_body(simple_inputs(), {"INPUT0": "INT32", "INPUT1": "INT32"}, binary=True)
    with pytest.raises(BadRequestError, match="4 bytes after the binary data"):
        decode_request(body + b"\0" * 4, length, SIMPLE)


def test_binary_bytes_element_count_must_match_the_shape() -> None:
    words = np.array([[b"x"] * 16], dtype=np.object_)
    body, length = triton_body(
        {"INPUT0": words, "INPUT1": words}, {"INPUT0": "BYTES", "INPUT1": "BYTES"}, binary=True
    )
    header = body[:length]
    broken = header.replace(b"[1,16]", b"[1,15]", 1)  # tritonclient writes compact JSON
    assert broken != header
    with pytest.raises(BadRequestError):
        decode_request(broken + body[length:], len(broken), STRINGS)


def test_non_utf8_bytes_are_refused_before_the_model() -> None:
    raw = np.array([[b"\xff\xfe"] * 16], dtype=np.object_)
    body, length = triton_body(
        {"INPUT0": raw, "INPUT1": raw}, {"INPUT0": "BYTES", "INPUT1": "BYTES"}, binary=True
    )
    with pytest.raises(BadRequestError, match="input 'INPUT0': BYTES elements must be UTF-8"):
        decode_request(body, length, STRINGS)


def test_shape_that_cannot_take_the_model_reshape_is_refused() -> None:
    reshaped = replace(
        SIMPLE,
        inputs=tuple(replace(spec, dims=(-1, 4), reshape=(16,)) for spec in SIMPLE.inputs),
    )
    fits = np.zeros((2, 4, 4), dtype=np.int32)
    body, length = triton_body(
        {"INPUT0": fits, "INPUT1": fits}, {"INPUT0": "INT32", "INPUT1": "INT32"}, binary=True
    )
    assert decode_request(body, length, reshaped).inputs[0].shape == (2, 4, 4)
    odd = np.zeros((1, 3, 4), dtype=np.int32)
    body, length = triton_body(
        {"INPUT0": odd, "INPUT1": odd}, {"INPUT0": "INT32", "INPUT1": "INT32"}, binary=True
    )
    with pytest.raises(BadRequestError, match=r"shape \[1, 3, 4\] cannot be reshaped"):
        decode_request(body, length, reshaped)


def test_classification_of_a_bytes_output_is_rejected() -> None:
    words = np.array([[b"x"] * 16], dtype=np.object_)
    body, _ = triton_body(
        {"INPUT0": words, "INPUT1": words}, {"INPUT0": "BYTES", "INPUT1": "BYTES"}, binary=False
    )
    import orjson

    document = orjson.loads(body)
    document["outputs"] = [{"name": "OUTPUT0", "parameters": {"classification": 2}}]
    with pytest.raises(BadRequestError, match="classification is not available for datatype BYTES"):
        decode_request(orjson.dumps(document), None, STRINGS)


def test_optional_inputs_may_be_left_out() -> None:
    optional = replace(SIMPLE, inputs=(SIMPLE.inputs[0], replace(SIMPLE.inputs[1], optional=True)))
    document = _simple_json()
    document["inputs"] = document["inputs"][:1]  # type: ignore[index]
    request = decode_request(json_body(document), None, optional)
    assert [tensor.name for tensor in request.inputs] == ["INPUT0"]


def test_json_numbers_are_cast_like_the_binary_encoding() -> None:
    ints_as_floats = [1, 2.5, -3] + [0] * 57
    body = json_body(
        {
            "inputs": [
                {"name": "data_0", "datatype": "FP32", "shape": [3, 4, 5], "data": ints_as_floats}
            ]
        }
    )
    tensor = decode_request(body, None, IMAGE).inputs[0]
    assert tensor.data == np.array(ints_as_floats, dtype="<f4").tobytes()


def test_ragged_json_data_is_refused() -> None:
    document = _simple_json(data=[[1, 2], [3]])
    with pytest.raises(BadRequestError, match="evenly nested"):
        decode_request(json_body(document), None, SIMPLE)


@pytest.mark.parametrize("datatype", ["FP32", "INT64", "BYTES"])
@pytest.mark.parametrize("binary", [False, True])
def test_a_zero_element_tensor_with_a_huge_dimension_is_refused(
    datatype: str, binary: bool
) -> None:
    """``[0, 2**62]`` holds no data, so its size check passes, but no array can take it."""
    config = replace(IMAGE, inputs=(replace(IMAGE.inputs[0], datatype=datatype, dims=(-1, -1)),))
    item: dict[str, object] = {"name": "data_0", "datatype": datatype, "shape": [0, 2**62]}
    if binary:
        item["parameters"] = {"binary_data_size": 0}
    else:
        item["data"] = []
    body = orjson.dumps({"inputs": [item]})
    with pytest.raises(BadRequestError, match="too large"):
        decode_request(body, len(body) if binary else None, config)
    item["shape"] = [0, 2**20]  # zero elements, a dimension an array can take: fine
    body = orjson.dumps({"inputs": [item]})
    assert decode_request(body, len(body) if binary else None, config).inputs[0].shape == (
        0,
        2**20,
    )
