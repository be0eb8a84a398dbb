"""gRPC requests with the same tensors as the binary HTTP bodies, serialized once.

A ``ModelInferRequest`` carries each input's bytes verbatim in ``raw_input_contents``, so the
binary body's bytes become the message's, and the miss slots (the first three INT32 of the first
input) sit at a fixed place in the serialized message too: the same prefix/slots/suffix scheme
as the HTTP bodies, and the same hit tensors, which therefore share the HTTP hits' cache entries.
"""

from __future__ import annotations

import struct

import orjson
from tritonclient.grpc import service_pb2

from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError

#: The full gRPC method name: the path of the HTTP/2 request.
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
_MARKER = struct.pack("<3i", 1_111_111_111, 1_222_222_222, 1_333_333_333)


def grpc_request_set(http: RequestSet) -> RequestSet:
    """The gRPC twin of a binary HTTP request set."""
    if http.encoding != "binary" or http.slot_format != "i32le":
        raise BenchError("gRPC requests are built from the binary HTTP request set")
    hits = tuple(_message(http.model, body, http) for body in http.hit_bodies)
    template = _message(http.model, http.miss_prefix + _MARKER + http.miss_suffix, http)
    prefix, marker, suffix = template.partition(_MARKER)
    if not marker or _MARKER in suffix:
        raise BenchError("cannot place the miss slots in the serialized gRPC request")
    return RequestSet(
        model=http.model,
        encoding="binary",
        path=MODEL_INFER,
        headers={},
        hit_bodies=hits,
        miss_prefix=prefix,
        miss_suffix=suffix,
        slot_format="i32le",
    )


def _message(model: str, body: bytes, http: RequestSet) -> bytes:
    """Serialize the binary body ``body`` (JSON header, then raw inputs) as a ModelInferRequest.
    Every body of a set has the same header (names, shapes, sizes), hence the same length."""
    header_length = int(http.headers["Inference-Header-Content-Length"])
    header = orjson.loads(body[:header_length])
    request = service_pb2.ModelInferRequest(model_name=model)
    offset = header_length
    for entry in header["inputs"]:
        size = int(entry["parameters"]["binary_data_size"])
        request.inputs.add(name=entry["name"], datatype=entry["datatype"], shape=entry["shape"])
        request.raw_input_contents.append(body[offset : offset + size])
        offset += size
    for entry in header.get("outputs", []):
        request.outputs.add(name=entry["name"])
    return bytes(request.SerializeToString())
