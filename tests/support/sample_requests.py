"""Requests to a running server for the sample models, encoded as tritonclient encodes them."""

from __future__ import annotations

import urllib.request
from types import ModuleType
from typing import Any

import httpx
import numpy as np
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.grpc import service_pb2

from support import loopback
from support.processes import ServerProcess


def sample_request(model: str, seed: int = 0) -> dict[str, tuple[np.ndarray, str]]:
    """Inputs for each sample model; ``seed`` varies the values (and so the key)."""
    if model == "simple":
        first = np.arange(16, dtype=np.int32).reshape(1, 16) + seed
        return {"INPUT0": (first, "INT32"), "INPUT1": (np.ones_like(first), "INT32")}
    if model == "simple_string":
        values = np.array([str(n + seed).encode() for n in range(16)], dtype=np.object_)
        threes = np.array([b"3"] * 16, dtype=np.object_)
        return {
            "INPUT0": (values.reshape(1, 16), "BYTES"),
            "INPUT1": (threes.reshape(1, 16), "BYTES"),
        }
    image = np.random.default_rng(seed).random((3, 224, 224), dtype=np.float32)
    return {"data_0": (image, "FP32")}


def binary_body(model: str, seed: int = 0, **options: Any) -> tuple[bytes, int | None]:
    """``model``'s sample request as tritonclient encodes it (binary inputs), and its JSON
    header's length; ``options`` go to ``generate_request_body``."""
    inputs = []
    for name, (array, datatype) in sample_request(model, seed).items():
        item = httpclient.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array, binary_data=True)
        inputs.append(item)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, **options)
    return bytes(body), json_size


def infer(
    server: ServerProcess,
    model: str,
    seed: int = 0,
    *,
    headers: dict[str, str] | None = None,
    parameters: dict[str, Any] | None = None,
) -> tuple[httpx.Response, Any]:
    """POST one request as tritonclient encodes it; returns the response and its parsed result."""
    body, json_size = binary_body(model, seed, request_id="r1", parameters=parameters)
    sent = {"Content-Type": "application/octet-stream", **(headers or {})}
    if json_size is not None:
        sent["Inference-Header-Content-Length"] = str(json_size)
    response = loopback.post(
        f"{server.base_url}/v2/models/{model}/infer", content=body, headers=sent, timeout=60
    )
    assert response.status_code == 200, response.text
    length = response.headers.get("Inference-Header-Content-Length")
    result = httpclient.InferResult.from_response_body(
        response.content, header_length=int(length) if length else None
    )
    return response, result


def simple_inputs(
    client: ModuleType, seed: int, *, second: int = 1, rows: int = 1, binary: bool = True
) -> list[Any]:
    """``simple``'s inputs as a tritonclient module (``tritonclient.http`` or ``.grpc``) builds
    them: ``INPUT0`` counts up from ``seed`` (row after row), ``INPUT1`` holds ``second``;
    ``binary``: HTTP's binary tensor extension (gRPC always sends raw bytes)."""
    first = np.arange(16 * rows, dtype=np.int32).reshape(rows, 16) + seed
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", np.full_like(first, second))):
        tensor = client.InferInput(name, [rows, 16], "INT32")
        if client is httpclient:
            tensor.set_data_from_numpy(array, binary_data=binary)
        else:
            tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    return inputs


def success_count(url: str, model: str) -> int:
    """Requests the server at ``url`` (``host:port``) answered for ``model`` itself, its own
    cache hits included (Triton's statistics extension): what a server in front never sent it."""
    stats = httpclient.InferenceServerClient(url).get_inference_statistics(model)
    return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def memo_figures(server: ServerProcess) -> dict[str, float]:
    """The answer memo's figures from /metrics (``tier="memo"``), by sample name: what a test
    reads to know that the memo answered, not only that the answer was right."""
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("tier") == "memo"
    }


def x_cache(server: ServerProcess, model: str, seed: int = 0, **kwargs: Any) -> str:
    return str(infer(server, model, seed, **kwargs)[0].headers["X-Cache"])


def simple_grpc_request() -> Any:
    """A ``ModelInferRequest`` for ``simple``: two INT32 [1, 16] inputs of zeros, raw contents."""
    data = bytes(64)
    return service_pb2.ModelInferRequest(
        model_name="simple",
        inputs=[
            service_pb2.ModelInferRequest.InferInputTensor(
                name=name, datatype="INT32", shape=[1, 16]
            )
            for name in ("INPUT0", "INPUT1")
        ],
        raw_input_contents=[data, data],
    )
