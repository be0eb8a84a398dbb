"""Random bad ``ModelInferRequest``s against a real server's gRPC port: never ``INTERNAL`` (unless
the model itself fails on values it cannot compute), never ``UNKNOWN``, never a crash.

The HTTP fuzz test's counterpart. Hypothesis fills every field of the message from Triton's own
generated code: model names and versions (real, unknown, empty), inputs with any datatype,
shape (negative, huge, empty), typed contents and raw contents that may or may not match,
shared-memory parameters naming regions that do not exist, outputs with classification and
binary parameters, and request parameters of every kind. Unary and streaming calls both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.processes import ServerProcess

from cachefleet.runtime.grpc.messages import service_pb2, service_pb2_grpc

LIMIT = 64 * 1024
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: The one INTERNAL a request may cause: the model failing on values (simple_string's strings).
MODEL_FAILURE = re.compile(r"^model '[^']+' version \d+ failed: ")
ALLOWED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.FAILED_PRECONDITION,
}


@pytest.fixture(scope="module")
def channel(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[grpc.Channel]:
    """One server for every example: the point is that it survives all of them."""
    args = ["--model-repository", str(model_repository), "--max-request-size", str(LIMIT)]
    server = ServerProcess(args, tmp_path_factory.mktemp("fuzz-grpc"))
    server.start()
    channel = grpc.insecure_channel(server.grpc_url)
    yield channel
    channel.close()
    assert server.process is not None
    assert server.process.poll() is None, "the server died under the fuzz"
    server.stop()


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> service_pb2_grpc.GRPCInferenceServiceStub:
    return service_pb2_grpc.GRPCInferenceServiceStub(channel)


_names = st.sampled_from(["INPUT0", "INPUT1", "OUTPUT0", "", "x" * 300, "INPUT0\x00"])
_datatypes = st.sampled_from(
    ["INT32", "INT8", "FP32", "BYTES", "BOOL", "UINT64", "FP16", "BF16", "", "INT33", "fp32"]
)
_shapes = st.lists(
    st.one_of(st.integers(-3, 20), st.sampled_from([2**31, 2**62, -(2**63)])), max_size=4
)
_text = st.text(max_size=20)
_parameter = st.one_of(
    st.builds(lambda v: service_pb2.InferParameter(bool_param=v), st.booleans()),
    st.builds(
        lambda v: service_pb2.InferParameter(int64_param=v), st.integers(-(2**63), 2**63 - 1)
    ),
    st.builds(lambda v: service_pb2.InferParameter(string_param=v), _text),
    st.builds(lambda v: service_pb2.InferParameter(double_param=v), st.floats()),
    st.builds(lambda v: service_pb2.InferParameter(uint64_param=v), st.integers(0, 2**64 - 1)),
)
_parameter_names = st.sampled_from(
    ["shared_memory_region", "shared_memory_byte_size", "shared_memory_offset", "classification",
     "binary_data", "cache", "priority", "timeout", "sequence_id", "", "x"]
)  # fmt: skip
_parameters = st.dictionaries(_parameter_names, _parameter, max_size=3)
_contents = st.one_of(
    st.none(),
    st.builds(
        lambda v: service_pb2.InferTensorContents(int_contents=v),
        st.lists(st.integers(-(2**31), 2**31 - 1), max_size=40),
    ),
    st.builds(
        lambda v: service_pb2.InferTensorContents(fp32_contents=v),
        st.lists(st.floats(width=32), max_size=40),
    ),
    st.builds(
        lambda v: service_pb2.InferTensorContents(bytes_contents=v),
        st.lists(st.binary(max_size=12), max_size=40),
    ),
    st.builds(
        lambda v: service_pb2.InferTensorContents(bool_contents=v),
        st.lists(st.booleans(), max_size=40),
    ),
)


@st.composite
def _input(draw: st.DrawFn) -> Any:
    tensor = service_pb2.ModelInferRequest.InferInputTensor(
        name=draw(_names), datatype=draw(_datatypes), shape=draw(_shapes)
    )
    contents = draw(_contents)
    if contents is not None:
        tensor.contents.CopyFrom(contents)
    for key, value in draw(_parameters).items():
        tensor.parameters[key].CopyFrom(value)
    return tensor


@st.composite
def infer_requests(draw: st.DrawFn) -> Any:
    request = service_pb2.ModelInferRequest(
        model_name=draw(st.sampled_from(
            ["simple", "simple_string", "simple_identity", "simple_int8", "nope", "", "../x"]
        )),
        model_version=draw(st.sampled_from(["", "1", "2", "x", "-1", "99999999999999999999"])),
        id=draw(_text),
    )  # fmt: skip
    request.inputs.extend(draw(st.lists(_input(), max_size=3)))
    for name in draw(st.lists(_names, max_size=2)):
        output = request.outputs.add(name=name)
        for key, value in draw(_parameters).items():
            output.parameters[key].CopyFrom(value)
    raw = draw(st.one_of(st.none(), st.lists(st.binary(max_size=80), max_size=3)))
    if raw is not None:
        request.raw_input_contents.extend(raw)
    for key, value in draw(_parameters).items():
        request.parameters[key].CopyFrom(value)
    return request


def check(error: grpc.RpcError) -> None:
    code, details = error.code(), error.details() or ""
    if code == grpc.StatusCode.INTERNAL:
        assert MODEL_FAILURE.match(details), details
        return
    assert code in ALLOWED, (code, details)
    assert details


@FUZZ
@given(request=infer_requests())
def test_model_infer_never_answers_internal_for_bad_input(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, request: Any
) -> None:
    try:
        stub.ModelInfer(request, timeout=30)
    except grpc.RpcError as error:
        check(error)


@settings(FUZZ, max_examples=40)
@given(requests=st.lists(infer_requests(), min_size=1, max_size=4))
def test_stream_infer_answers_each_bad_request_in_band(
    stub: service_pb2_grpc.GRPCInferenceServiceStub, requests: list[Any]
) -> None:
    answers = list(stub.ModelStreamInfer(iter(requests), timeout=60))
    assert len(answers) == len(requests)
    for answer in answers:
        if answer.error_message:
            assert not answer.error_message.startswith("internal server error"), answer


def test_garbage_bytes_for_a_message_are_refused(
    channel: grpc.Channel, stub: service_pb2_grpc.GRPCInferenceServiceStub
) -> None:
    raw: Any = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    for garbage in (b"\xff" * 7, b"\x0a\xff\xff\xff\xff\x0f", b"\x12" + b"\x80" * 10):
        with pytest.raises(grpc.RpcError) as caught:
            raw(garbage, timeout=10)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "malformed request message" in (caught.value.details() or "")
    stream: Any = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
    [answer] = list(stream(iter([b"\xff" * 7]), timeout=10))
    reply = service_pb2.ModelStreamInferResponse.FromString(answer)
    assert reply.error_message.startswith("malformed request message")
    assert stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=10).live
