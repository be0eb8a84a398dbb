"""Requests as a client sends them, and the answers numpy says they must get.

The chaos run and the reliability tests share these: a cache may be slow or cold, never
wrong, and "wrong" is decided here, without any server.
"""

from __future__ import annotations

import numpy as np
import orjson

from cachefleet.runtime.cache.key import KeySpace, compute_key
from cachefleet.runtime.tensor import Tensor

MODEL = "simple"
POOL_SIZE = 24
PLANTED_BASE = 1_000_000_000
PLANTED_COUNT = 4000

# -- the model's answer, computed without any server ------------------------------------------


def inputs_for(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The two INT32 inputs of request ``seed`` (batch 1 or 2, the full int32 range)."""
    rng = np.random.default_rng(seed)
    batch = 1 + seed % 2
    low, high = np.iinfo(np.int32).min, np.iinfo(np.int32).max
    first = rng.integers(low, high, (batch, 16), dtype=np.int32, endpoint=True)
    second = rng.integers(low, high, (batch, 16), dtype=np.int32, endpoint=True)
    return first, second


def expected_outputs(seed: int) -> dict[str, np.ndarray]:
    """What ``simple`` computes: the sum and the difference, wrapping like int32 does."""
    first, second = inputs_for(seed)
    with np.errstate(over="ignore"):
        return {"OUTPUT0": first + second, "OUTPUT1": first - second}


def input_tensors(seed: int) -> list[Tensor]:
    first, second = inputs_for(seed)
    return [Tensor.from_numpy("INPUT0", first), Tensor.from_numpy("INPUT1", second)]


def redis_key(seed: int, fingerprint: str, keys: KeySpace | None = None) -> str:
    """The Redis key the servers use for request ``seed`` (no keyed parameters are sent), on
    the model files whose fingerprint is ``fingerprint``."""
    key = compute_key(MODEL, "1", fingerprint, input_tensors(seed), {})
    return (keys or KeySpace()).redis_key(key)


def served_fingerprint(url: str, model: str = MODEL, version: str = "") -> str:
    """The fingerprint of the model version a server at ``url`` serves (its config reports
    it); the latest version when ``version`` is empty."""
    import json
    import urllib.request

    path = f"/v2/models/{model}" + (f"/versions/{version}" if version else "") + "/config"
    with urllib.request.urlopen(f"{url}{path}", timeout=10) as response:
        document = json.load(response)
    return str(document["parameters"]["cachefleet.fingerprint"]["string_value"])


# -- requests as a client sends them -----------------------------------------------------------


def request_body(seed: int, binary: bool) -> tuple[bytes, dict[str, str]]:
    """Request ``seed`` in Triton's binary tensor extension, or as plain JSON."""
    first, second = inputs_for(seed)
    if not binary:
        document = {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": list(a.shape), "data": a.ravel().tolist()}
                for n, a in (("INPUT0", first), ("INPUT1", second))
            ]
        }
        return orjson.dumps(document), {"Content-Type": "application/json"}
    header = orjson.dumps(
        {
            "inputs": [
                {"name": n, "datatype": "INT32", "shape": list(a.shape),
                 "parameters": {"binary_data_size": a.nbytes}}
                for n, a in (("INPUT0", first), ("INPUT1", second))
            ],
            "parameters": {"binary_data_output": True},
        }
    )  # fmt: skip
    headers = {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(len(header)),
    }
    return header + first.tobytes() + second.tobytes(), headers


def decode_outputs(body: bytes, header_length: str | None) -> dict[str, np.ndarray]:
    """The outputs of a response (JSON ``data`` or binary), as int32 arrays by name."""
    size = int(header_length) if header_length is not None else len(body)
    document = orjson.loads(body[:size])
    outputs: dict[str, np.ndarray] = {}
    offset = size
    for item in document["outputs"]:
        if item.get("datatype") != "INT32":
            raise ValueError(f"output {item.get('name')!r} has datatype {item.get('datatype')!r}")
        binary_size = item.get("parameters", {}).get("binary_data_size")
        if binary_size is None:
            array = np.asarray(item["data"], dtype=np.int32)
        else:
            array = np.frombuffer(body[offset : offset + binary_size], dtype="<i4")
            offset += binary_size
        outputs[item["name"]] = array.reshape(item["shape"])
    return outputs


def answer_is_right(seed: int, outputs: dict[str, np.ndarray]) -> bool:
    want = expected_outputs(seed)
    return outputs.keys() == want.keys() and all(
        outputs[name].shape == want[name].shape and np.array_equal(outputs[name], want[name])
        for name in want
    )
