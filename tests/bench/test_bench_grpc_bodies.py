"""The gRPC load's requests: the binary HTTP bodies' tensors, valid messages, unique misses."""

from __future__ import annotations

import struct

import orjson
from tritonclient.grpc import service_pb2

from cachefleet.bench.bodies import SLOT_BASE, InputSpec, build_request_set, new_nonce
from cachefleet.bench.grpc_bodies import MODEL_INFER, grpc_request_set

SIMPLE = [InputSpec("INPUT0", "INT32", (1, 16)), InputSpec("INPUT1", "INT32", (1, 16))]
OUTPUTS = ["OUTPUT0", "OUTPUT1"]


def _parse(data: bytes) -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest()
    message.ParseFromString(data)
    return message


def test_hits_carry_the_same_tensors_as_the_http_bodies() -> None:
    http = build_request_set("simple", SIMPLE, OUTPUTS, "binary", warm_count=4)
    grpc = grpc_request_set(http)
    assert grpc.path == MODEL_INFER
    header_length = int(http.headers["Inference-Header-Content-Length"])
    for body, data in zip(http.hit_bodies, grpc.hit_bodies, strict=True):
        message = _parse(data)
        header = orjson.loads(body[:header_length])
        assert message.model_name == "simple"
        assert [(i.name, i.datatype, list(i.shape)) for i in message.inputs] == [
            (i["name"], i["datatype"], i["shape"]) for i in header["inputs"]
        ]
        assert b"".join(message.raw_input_contents) == body[header_length:]
        assert [o.name for o in message.outputs] == OUTPUTS


def test_misses_are_valid_messages_with_unique_slots() -> None:
    grpc = grpc_request_set(build_request_set("simple", SIMPLE, OUTPUTS, "binary"))
    nonce = new_nonce()
    bodies = [grpc.miss_body(nonce, sender, n) for sender in range(3) for n in range(1, 100)]
    assert len(set(bodies)) == len(bodies)
    message = _parse(grpc.miss_body(nonce, 2, 7))
    assert len(message.raw_input_contents[0]) == 64
    slots = struct.unpack("<3i", message.raw_input_contents[0][:12])
    assert slots == (nonce, SLOT_BASE + 2, SLOT_BASE + 7)
