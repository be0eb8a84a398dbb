"""Helpers of the dynamic batching and row cache tests: a tiny model that fails on demand, the
server's metrics, and requests sent from threads so that they wait in the server together."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import threading
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper
from prometheus_client.parser import text_string_to_metric_families

from cachefleet.runtime.samples.onnx_build import make_model
from cachefleet.runtime.tensor import Tensor
from support.processes import ServerProcess
from support.waiting import wait_for

#: What ``picker`` returns for indices 0 to 3; any other index makes ONNX Runtime fail.
TABLE = [10.0, 20.0, 30.0, 40.0]
#: Long enough that no test ever sees it expire: a batch goes when it reaches a preferred size.
FOREVER_US = 600_000_000


def wait_for_three(extra: str = "") -> str:
    """Dynamic batching that runs a batch only once three rows wait (its delay never runs out),
    so a test decides when a batch goes by sending its third row, never by timing."""
    return (
        f"dynamic_batching {{ preferred_batch_size: [ 3 ] "
        f"max_queue_delay_microseconds: {FOREVER_US} {extra} }}"
    )


def picker_config(name: str, *, batching: str, extra: str = "") -> str:
    return f"""
name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ {{ name: "INDEX", data_type: TYPE_INT64, dims: [ 1 ] }} ]
output [ {{ name: "VALUE", data_type: TYPE_FP32, dims: [ 1 ] }} ]
{batching}
{extra}
"""


def write_picker(root: Path, name: str, config: str) -> None:
    """``picker``: VALUE = TABLE[INDEX], row by row; an index outside the table fails the run."""
    table = helper.make_tensor("table", TensorProto.FLOAT, [len(TABLE)], TABLE)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "INDEX"], ["VALUE"], axis=0)],
        "picker",
        [helper.make_tensor_value_info("INDEX", TensorProto.INT64, ["batch", 1])],
        [helper.make_tensor_value_info("VALUE", TensorProto.FLOAT, ["batch", 1])],
        initializer=[table],
    )
    folder = root / name
    (folder / "1").mkdir(parents=True)
    onnx.save(make_model(graph), folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(config)


def write_variant(root: Path, samples: Path, sample: str, name: str, config: str) -> None:
    """A sample's model file under another name and config (hard-linked where the file system
    allows, else copied: the server refuses a symbolic link out of its repository)."""
    folder = root / name
    (folder / "1").mkdir(parents=True)
    _link(samples / sample / "1" / "model.onnx", folder / "1" / "model.onnx")
    for extra in (samples / sample).glob("*.txt"):
        _link(extra, folder / extra.name)
    (folder / "config.pbtxt").write_text(config.replace(f'name: "{sample}"', f'name: "{name}"'))


def _link(source: Path, destination: Path) -> None:
    try:
        os.link(source, destination)
    except OSError:
        shutil.copyfile(source, destination)


def metric(server: ServerProcess, name: str, model: str) -> float:
    """The value of ``name`` for ``model``, summed over its other labels (tiers); 0 if absent.
    Histograms give ``_sum`` and ``_count`` samples under those names."""
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(
        float(sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and sample.labels.get("model") == model
    )


def wait_pending(server: ServerProcess, model: str, count: int) -> None:
    """Wait until ``count`` requests of ``model`` wait in its batch queue."""

    def reached() -> bool:
        return metric(server, "nv_inference_pending_request_count", model) == count

    wait_for(reached, f"{count} request(s) of {model} waiting in the batch queue", 30)


def post(server: ServerProcess, model: str, body: dict[str, Any]) -> tuple[int, str | None, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        connection.request("POST", f"/v2/models/{model}/infer", body=json.dumps(body))
        response = connection.getresponse()
        return response.status, response.getheader("X-Cache"), json.loads(response.read())
    finally:
        connection.close()


def pick_body(*indices: int) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "INDEX", "datatype": "INT64", "shape": [len(indices), 1], "data": indices}
        ]
    }


@dataclass
class InFlight:
    """A request sent from its own thread; ``result`` is set when the answer arrives."""

    server: ServerProcess
    model: str
    body: dict[str, Any]
    result: tuple[int, str | None, Any] | None = None
    thread: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.thread = threading.Thread(target=self._send, daemon=True)
        self.thread.start()

    def _send(self) -> None:
        self.result = post(self.server, self.model, self.body)

    def wait(self) -> tuple[int, str | None, Any]:
        self.thread.join(120)
        assert self.result is not None, "no answer"
        return self.result


def values(answer: Any) -> list[float]:
    return [float(value) for value in answer["outputs"][0]["data"]]


def post_binary(
    server: ServerProcess, model: str, inputs: dict[str, np.ndarray]
) -> tuple[int, str | None, dict[str, bytes]]:
    """A request in Triton's binary tensor extension: (status, X-Cache, raw bytes per output),
    the bytes in the canonical form (little-endian; BYTES as length-prefixed elements)."""
    tensors = {name: Tensor.from_numpy(name, array) for name, array in inputs.items()}
    header = json.dumps(
        {
            "inputs": [
                {"name": t.name, "datatype": t.datatype, "shape": list(t.shape),
                 "parameters": {"binary_data_size": len(t.data)}}
                for t in tensors.values()
            ],
            "parameters": {"binary_data_output": True},
        }
    ).encode()  # fmt: skip
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    try:
        connection.request(
            "POST",
            f"/v2/models/{model}/infer",
            body=header + b"".join(t.data for t in tensors.values()),
            headers={"Inference-Header-Content-Length": str(len(header))},
        )
        response = connection.getresponse()
        body = response.read()
        x_cache = response.getheader("X-Cache")
        length = response.getheader("Inference-Header-Content-Length")
    finally:
        connection.close()
    if response.status != 200 or length is None:
        return response.status, x_cache, {}
    document, offset, outputs = json.loads(body[: int(length)]), int(length), {}
    for output in document["outputs"]:
        size = output["parameters"]["binary_data_size"]
        outputs[output["name"]] = body[offset : offset + size]
        offset += size
    return response.status, x_cache, outputs
