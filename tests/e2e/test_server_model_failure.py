"""A model that fails at run time answers 500 with the reason, and the server keeps serving."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from support.processes import ServerProcess

from cachefleet.runtime.samples.onnx_build import make_model

CONFIG = """
name: "fragile"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "X", data_type: TYPE_FP32, dims: [ -1 ] } ]
output [ { name: "Y", data_type: TYPE_FP32, dims: [ 2, 2 ] } ]
response_cache { enable: true }
"""


def _fragile_repository(root: Path) -> Path:
    """``fragile`` reshapes its input to [2, 2]: any input without 4 elements fails in the model."""
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [2, 2])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["X", "shape"], ["Y"])],
        "fragile",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 2])],
        initializer=[shape],
    )
    folder = root / "fragile"
    (folder / "1").mkdir(parents=True)
    onnx.save(make_model(graph), folder / "1" / "model.onnx")
    (folder / "config.pbtxt").write_text(CONFIG)
    return root


def _infer(server: ServerProcess, values: list[float]) -> tuple[int, str | None, dict[str, object]]:
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [len(values)], "data": values}]}
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    connection.request("POST", "/v2/models/fragile/infer", body=json.dumps(body))
    response = connection.getresponse()
    payload = json.loads(response.read())
    connection.close()
    return response.status, response.getheader("X-Cache"), payload


def test_model_failure_is_500_and_not_cached(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    server = make_server(repository=_fragile_repository(tmp_path / "repo"))
    for _ in range(2):  # a failure is never cached: the second request runs the model again
        status, x_cache, answer = _infer(server, [1.0, 2.0, 3.0])
        assert status == 500
        assert x_cache is None  # no cache tier answered: no X-Cache
        assert "model 'fragile'" in str(answer["error"])
    status, x_cache, answer = _infer(server, [1.0, 2.0, 3.0, 4.0])
    assert (status, x_cache) == (200, "miss")
    assert answer["outputs"] == [
        {"name": "Y", "datatype": "FP32", "shape": [2, 2], "data": [1.0, 2.0, 3.0, 4.0]}
    ]
