"""Outputs come in the configuration's order on every path: a miss, a local and a Redis hit,
and through the row cache (partial, and every row cached), over HTTP and gRPC.

``za`` declares its outputs ``[Z, A]`` (not in name order, and not in its graph's order), so a
path that sorts outputs by name, or takes the graph's order, shows.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc as grpcclient
from onnx import TensorProto, helper
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.waiting import wait_for

from cachefleet.runtime.samples.onnx_build import make_model

CONFIG = """
name: "za"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "X", data_type: TYPE_INT32, dims: [ 2 ] } ]
output [
  { name: "Z", data_type: TYPE_INT32, dims: [ 2 ] },
  { name: "A", data_type: TYPE_INT32, dims: [ 2 ] }
]
response_cache { enable: true }
parameters { key: "cachefleet.row_cache" value { string_value: "true" } }
"""
ORDER = ["Z", "A"]


@pytest.fixture(scope="module")
def za_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``za``: Z = 2X, A = X; the graph lists A first."""
    root = tmp_path_factory.mktemp("order") / "repo"
    (root / "za" / "1").mkdir(parents=True)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["X"], ["A"]), helper.make_node("Add", ["X", "X"], ["Z"])],
        "za",
        [helper.make_tensor_value_info("X", TensorProto.INT32, ["batch", 2])],
        [
            helper.make_tensor_value_info("A", TensorProto.INT32, ["batch", 2]),
            helper.make_tensor_value_info("Z", TensorProto.INT32, ["batch", 2]),
        ],
    )
    onnx.save_model(make_model(graph), str(root / "za" / "1" / "model.onnx"))
    (root / "za" / "config.pbtxt").write_text(CONFIG)
    return root


def http(server: ServerProcess, rows: list[int]) -> tuple[str, list[str]]:
    """X-Cache and the outputs' names, in the order of the response."""
    data = [[row, row + 1] for row in rows]
    document = {"inputs": [{"name": "X", "datatype": "INT32", "shape": [len(rows), 2],
                            "data": data}]}  # fmt: skip
    response = loopback.post(f"{server.base_url}/v2/models/za/infer", json=document, timeout=30)
    assert response.status_code == 200, response.text
    outputs = response.json()["outputs"]
    by_name = {output["name"]: output["data"] for output in outputs}
    assert by_name["Z"] == [2 * value for pair in data for value in pair]
    assert by_name["A"] == [value for pair in data for value in pair]
    return response.headers["X-Cache"], [output["name"] for output in outputs]


def grpc(server: ServerProcess, rows: list[int]) -> list[str]:
    """The outputs' names in the gRPC response (the order of ``raw_output_contents`` too)."""
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        item = grpcclient.InferInput("X", [len(rows), 2], "INT32")
        item.set_data_from_numpy(np.array([[row, row + 1] for row in rows], dtype=np.int32))
        result = client.infer("za", [item])
        names = [output.name for output in result.get_response().outputs]
        assert result.as_numpy("Z").tolist() == [[2 * row, 2 * row + 2] for row in rows]
        return names
    finally:
        client.close()


def test_outputs_keep_the_config_order_on_every_path(
    make_server: Callable[..., ServerProcess], redis_server: RedisProcess, za_repository: Path
) -> None:
    first = make_server(
        "--cache", "tiered", "--redis-url", redis_server.url, repository=za_repository
    )
    assert http(first, [1, 2]) == ("miss", ORDER)
    assert http(first, [1, 2]) == ("hit-local", ORDER)
    assert http(first, [2, 3]) == ("partial", ORDER)  # row 2 cached, row 3 ran
    assert http(first, [3, 1]) == ("hit-local", ORDER)  # every row cached, a new batch
    assert grpc(first, [1, 2]) == ORDER
    assert grpc(first, [4, 5]) == ORDER  # a gRPC miss
    assert grpc(first, [5, 6]) == ORDER  # a gRPC partial
    # 5 whole requests and 6 rows, once the write-behind has put them in Redis.
    keys = redis_server.client().keys
    wait_for(lambda: len(keys("cachefleet:v2:default:za:*")) >= 11, "inserts to reach Redis")
    second = make_server(
        "--cache", "tiered", "--redis-url", redis_server.url, repository=za_repository
    )
    assert http(second, [1, 2]) == ("hit-redis", ORDER)
    assert http(second, [2, 7]) == ("partial", ORDER)  # row 2 from Redis, row 7 ran
    assert http(second, [3, 4]) == ("hit-redis", ORDER)  # rows from Redis
