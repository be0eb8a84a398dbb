"""Rendering responses: JSON or binary per output, output selection, the request id, and
Triton's classification extension; parsed back with tritonclient's own response parser."""

from __future__ import annotations

import numpy as np
import orjson
import tritonclient.http as httpclient
from support.protocol_models import IMAGE, SIMPLE, STRINGS, simple_inputs, triton_body

from cachefleet.runtime.protocol import InferRequest, decode_request, encode_response
from cachefleet.runtime.protocol.classification import classify
from cachefleet.runtime.tensor import Tensor

SUM = np.arange(16, dtype=np.int32).reshape(1, 16)
DIFF = -SUM
OUTPUTS = [Tensor.from_numpy("OUTPUT0", SUM), Tensor.from_numpy("OUTPUT1", DIFF)]
TYPES = {"INPUT0": "INT32", "INPUT1": "INT32"}
OUTPUT_NAMES = ("OUTPUT0", "OUTPUT1")


def _request(binary: bool = False, outputs=None, request_id: str = "") -> InferRequest:  # type: ignore[no-untyped-def]
    body, length = triton_body(
        simple_inputs(), TYPES, binary=binary, outputs=outputs, request_id=request_id
    )
    return decode_request(body, length, SIMPLE)


def _render(request: InferRequest, outputs=OUTPUTS, config=SIMPLE, labels=None):  # type: ignore[no-untyped-def]
    encoded = encode_response(
        request,
        outputs,
        model_name=config.name,
        model_version="1",
        labels=labels or {},
        batched=config.max_batch_size > 0,
    )
    result = httpclient.InferenceServerClient.parse_response_body(
        encoded.body, header_length=encoded.header_length
    )
    return encoded, result


def test_all_outputs_in_binary_when_none_requested() -> None:
    # tritonclient asks for binary_data_output when it requests no outputs.
    encoded, result = _render(_request(binary=True))
    assert encoded.header_length is not None
    header = orjson.loads(encoded.body[: encoded.header_length])
    assert [o["name"] for o in header["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    assert header["outputs"][0]["parameters"] == {"binary_data_size": 64}
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SUM)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DIFF)


def test_json_outputs_and_request_id() -> None:
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0", "OUTPUT1")
    ]
    encoded, result = _render(_request(outputs=outputs, request_id="abc"))
    assert encoded.header_length is None
    document = orjson.loads(encoded.body)
    assert document["id"] == "abc"
    assert (document["model_name"], document["model_version"]) == ("simple", "1")
    assert document["outputs"][1] == {
        "name": "OUTPUT1", "datatype": "INT32", "shape": [1, 16], "data": DIFF.ravel().tolist()
    }  # fmt: skip
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SUM)


def test_mixed_binary_and_json_outputs_and_selection() -> None:
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=False),
    ]
    encoded, result = _render(_request(outputs=outputs))
    header = orjson.loads(encoded.body[: encoded.header_length])
    assert [o["name"] for o in header["outputs"]] == ["OUTPUT1", "OUTPUT0"]
    assert "data" in header["outputs"][1]
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DIFF)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), SUM)


def test_only_the_requested_output_is_rendered() -> None:
    outputs = [httpclient.InferRequestedOutput("OUTPUT1", binary_data=False)]
    _, result = _render(_request(outputs=outputs))
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), DIFF)


def test_bytes_outputs_in_json_and_binary() -> None:
    words = np.array([[f"w{i}".encode() for i in range(16)]], dtype=np.object_)
    outputs = [Tensor.from_numpy("OUTPUT0", words), Tensor.from_numpy("OUTPUT1", words)]
    for binary in (False, True):
        wanted = [httpclient.InferRequestedOutput(n, binary_data=binary) for n in OUTPUT_NAMES]
        body, length = triton_body(
            {"INPUT0": words, "INPUT1": words},
            {"INPUT0": "BYTES", "INPUT1": "BYTES"},
            binary=binary,
            outputs=wanted,
        )
        _, result = _render(decode_request(body, length, STRINGS), outputs, STRINGS)
        got = result.as_numpy("OUTPUT1")
        assert [item if isinstance(item, bytes) else item.encode() for item in got.ravel()] == list(
            words.ravel()
        )


def test_classification_matches_triton_format() -> None:
    scores = np.array([0.1, 0.7, 0.05, 0.7, 0.15, 0, 0, 0, 0, 0], dtype=np.float32)
    tensor = Tensor.from_numpy("fc6_1", scores.reshape(10, 1, 1))
    labels = ["zero", "one", "two", "three", "four"]
    top = classify(tensor, 3, labels, batched=False)
    assert top.datatype == "BYTES"
    assert top.shape == (3,)
    assert [e.decode() for e in top.to_numpy()] == [
        "0.700000:1:one", "0.700000:3:three", "0.150000:4:four"
    ]  # fmt: skip
    # Without a label for an index, the label part is left out, as Triton does.
    assert classify(tensor, 1, [], batched=False).to_numpy()[0] == b"0.700000:1"


def test_classification_is_per_batch_row_for_batched_models() -> None:
    rows = np.array([[1, 9, 5], [7, 2, 3]], dtype=np.int32)
    top = classify(Tensor.from_numpy("OUTPUT0", rows), 5, [], batched=True)
    assert top.shape == (2, 3)
    assert top.to_numpy().tolist() == [[b"9:1", b"5:2", b"1:0"], [b"7:0", b"3:2", b"2:1"]]


def test_classification_request_renders_labels() -> None:
    image = np.zeros((3, 4, 2), dtype=np.float32)
    outputs = [httpclient.InferRequestedOutput("fc6_1", binary_data=False, class_count=2)]
    body, length = triton_body({"data_0": image}, {"data_0": "FP32"}, binary=True, outputs=outputs)
    request = decode_request(body, length, IMAGE)
    scores = np.arange(10, dtype=np.float32).reshape(10, 1, 1) / 10
    labels = {"fc6_1": [f"class-{i}" for i in range(10)]}
    _, result = _render(request, [Tensor.from_numpy("fc6_1", scores)], IMAGE, labels)
    assert result.as_numpy("fc6_1").tolist() == ["0.900000:9:class-9", "0.800000:8:class-8"]


def test_one_set_of_outputs_reads_back_equal_as_json_and_as_binary() -> None:
    """A cache hit renders the same stored tensors for clients that ask either way."""
    as_json = _render(_request(binary=False, outputs=None))[1]
    as_binary = _render(_request(binary=True, outputs=None))[1]
    for name, expected in (("OUTPUT0", SUM), ("OUTPUT1", DIFF)):
        np.testing.assert_array_equal(as_json.as_numpy(name), expected)
        np.testing.assert_array_equal(as_binary.as_numpy(name), expected)
