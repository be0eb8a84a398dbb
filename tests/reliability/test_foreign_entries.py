"""A cached entry is served only for a request with the same full key digest: a real entry of
another input, version, model or parameter set, copied under a real key in a real Redis, is
refused (a miss, counted as corrupt) and the client gets the model's own answer."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis as redis_py
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.waiting import wait_for

from cachefleet.runtime.cache.key import KeySpace, compute_key
from cachefleet.runtime.tensor import Tensor, encode_bytes_elements
from harness.chaos.answers import (
    answer_is_right,
    decode_outputs,
    input_tensors,
    request_body,
    served_fingerprint,
)


@pytest.fixture
def versioned_repository(model_repository: Path, tmp_path: Path) -> Path:
    """``simple`` in versions 1 and 2 (same graph, so same answers), and ``simple_string``."""
    repository = tmp_path / "versioned"
    for name in ("simple", "simple_string"):
        shutil.copytree(model_repository / name, repository / name)
    shutil.copytree(repository / "simple" / "1", repository / "simple" / "2")
    config = repository / "simple" / "config.pbtxt"
    config.write_text(config.read_text() + "\nversion_policy: { all: {} }\n")
    return repository


def post(
    server: ServerProcess, seed: int, version: str = "1", parameters: dict[str, Any] | None = None
) -> tuple[str, bool]:
    """Request ``seed`` from ``simple``; returns X-Cache and whether the answer is numpy's."""
    body, headers = request_body(seed, binary=True)
    if parameters:
        size = int(headers["Inference-Header-Content-Length"])
        header = orjson.loads(body[:size])
        header["parameters"].update(parameters)
        encoded = orjson.dumps(header)
        body = encoded + body[size:]
        headers["Inference-Header-Content-Length"] = str(len(encoded))
    url = f"{server.base_url}/v2/models/simple/versions/{version}/infer"
    response = loopback.post(url, content=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    outputs = decode_outputs(response.content, response.headers["Inference-Header-Content-Length"])
    return response.headers["X-Cache"], answer_is_right(seed, outputs)


def post_strings(server: ServerProcess) -> str:
    """One ``simple_string`` request; returns its Redis key as the server computes it."""
    values: list[list[object]] = [[str(n) for n in range(16)], ["3"] * 16]
    document = {"inputs": [
        {"name": name, "datatype": "BYTES", "shape": [1, 16], "data": data}
        for name, data in zip(("INPUT0", "INPUT1"), values, strict=True)
    ]}  # fmt: skip
    response = loopback.post(
        f"{server.base_url}/v2/models/simple_string/infer", json=document, timeout=30
    )
    assert response.status_code == 200, response.text
    tensors = [
        Tensor(name, "BYTES", (1, 16), encode_bytes_elements(data))
        for name, data in zip(("INPUT0", "INPUT1"), values, strict=True)
    ]
    fingerprint = served_fingerprint(server.base_url, "simple_string")
    return KeySpace().redis_key(compute_key("simple_string", "1", fingerprint, tensors, {}))


def stored(redis: RedisProcess, key: str) -> bytes:
    """The entry at ``key`` once the server's write-behind has put it there."""
    client = redis_py.Redis(port=redis.port)
    value = wait_for(lambda: client.get(key), f"the server to store {key}")
    assert isinstance(value, bytes)
    return value


def refused(server: ServerProcess) -> float:
    text = loopback.get(f"{server.base_url}/metrics", timeout=10).text
    line = 'cachefleet_cache_errors_total{kind="corrupt",tier="redis"} '
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


def simple_key(
    server: ServerProcess,
    seed: int,
    version: str = "1",
    parameters: dict[str, Any] | None = None,
) -> str:
    """The Redis key of request ``seed`` to ``simple`` as ``server`` computes it."""
    fingerprint = served_fingerprint(server.base_url, "simple", version)
    key = compute_key("simple", version, fingerprint, input_tensors(seed), parameters or {})
    return KeySpace().redis_key(key)


@pytest.mark.parametrize("source", ["input", "version", "model", "parameters"])
def test_an_entry_of_another_request_is_never_served(
    make_redis: Callable[..., RedisProcess],
    make_server: Callable[..., ServerProcess],
    versioned_repository: Path,
    source: str,
) -> None:
    redis = make_redis()
    # Redis only: every lookup reads the planted value, no local copy can hide it.
    server = make_server("--cache", "redis", "--redis-url", redis.url,
                         repository=versioned_repository)  # fmt: skip
    target = 7
    if source == "input":
        assert post(server, 8) == ("miss", True)
        foreign = stored(redis, simple_key(server, 8))
    elif source == "version":  # the same input through version 2: the same bytes, another key
        assert post(server, target, version="2") == ("miss", True)
        foreign = stored(redis, simple_key(server, target, version="2"))
    elif source == "model":
        foreign = stored(redis, post_strings(server))
    else:
        assert post(server, target, parameters={"tag": "a"}) == ("miss", True)
        foreign = stored(redis, simple_key(server, target, parameters={"tag": "a"}))

    redis_py.Redis(port=redis.port).set(simple_key(server, target), foreign)
    assert post(server, target) == ("miss", True)
    assert refused(server) == 1
    # The refused entry was replaced by the right one, which now serves.
    wait_for(
        lambda: stored(redis, simple_key(server, target)) != foreign, "the entry to be replaced"
    )
    assert post(server, target) == ("hit-redis", True)
