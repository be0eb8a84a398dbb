"""Request bodies the load generators send: valid for the server, hits fixed, misses unique."""

from __future__ import annotations

import struct

import numpy as np
import orjson

from cachefleet.bench.bodies import SLOT_BASE, SLOT_LIMIT, InputSpec, build_request_set, new_nonce

SIMPLE = [InputSpec("INPUT0", "INT32", (1, 16)), InputSpec("INPUT1", "INT32", (1, 16))]
OUTPUTS = ["OUTPUT0", "OUTPUT1"]


def test_binary_bodies_follow_the_binary_tensor_extension() -> None:
    requests = build_request_set("simple", SIMPLE, OUTPUTS, "binary", warm_count=4)
    header_length = int(requests.headers["Inference-Header-Content-Length"])
    for body in (*requests.hit_bodies, requests.miss_body(new_nonce(), 0, 1)):
        header = orjson.loads(body[:header_length])
        assert [entry["parameters"]["binary_data_size"] for entry in header["inputs"]] == [64, 64]
        assert len(body) == header_length + 128
        assert all(out["parameters"]["binary_data"] for out in header["outputs"])
    assert len(set(requests.hit_bodies)) == 4


def test_miss_bodies_never_repeat_across_senders_counters_and_runs() -> None:
    requests = build_request_set("simple", SIMPLE, OUTPUTS, "binary")
    nonces = [new_nonce(), new_nonce()]
    bodies = [
        requests.miss_body(nonce, sender, counter)
        for nonce in nonces
        for sender in range(4)
        for counter in range(1, 200)
    ]
    assert len(set(bodies)) == len(bodies)
    assert set(bodies).isdisjoint(requests.hit_bodies)


def test_miss_slots_are_finite_floats_for_fp32_models() -> None:
    densenet = [InputSpec("data_0", "FP32", (3, 224, 224))]
    requests = build_request_set("densenet_onnx", densenet, ["fc6_1"], "binary", warm_count=1)
    header_length = int(requests.headers["Inference-Header-Content-Length"])
    body = requests.miss_body(SLOT_LIMIT - 1, 1, 10**6)
    data = np.frombuffer(body[header_length:], dtype="<f4")
    assert data.size == 3 * 224 * 224
    assert np.isfinite(data).all()
    assert struct.unpack("<3i", body[header_length : header_length + 12])[1] == SLOT_BASE + 1


def test_json_miss_bodies_are_valid_json_with_the_declared_shape() -> None:
    requests = build_request_set("simple", SIMPLE, OUTPUTS, "json")
    document = orjson.loads(requests.miss_body(new_nonce(), 3, 42))
    first = document["inputs"][0]
    assert first["shape"] == [1, 16]
    assert len(first["data"]) == 16
    assert first["data"][1:3] == [SLOT_BASE + 3, SLOT_BASE + 42]
    assert requests.headers["Content-Type"] == "application/json"
