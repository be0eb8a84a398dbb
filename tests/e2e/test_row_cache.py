"""The row cache on a real server: a batched request takes its cached rows from the tiers, runs
only the others, and answers ``partial`` with every row in its place, byte for byte what ONNX
Runtime gives for the whole batch on the sample's own model file."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support.batching import metric, post_binary, write_variant
from support.processes import RedisProcess, ServerProcess
from support.waiting import wait_for

from cachefleet.runtime.tensor import Tensor

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples

ROW_CACHE = 'parameters { key: "cachefleet.row_cache" value { string_value: "true" } }\n'
BATCHING = "dynamic_batching { max_queue_delay_microseconds: 500 }\n"
ROW_HITS = "cachefleet_cache_row_hits_total"
ROW_MISSES = "cachefleet_cache_row_misses_total"


@pytest.fixture(scope="module")
def row_repository(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``simple`` and ``simple_string`` as they are, ``*_rows`` with the row cache and dynamic
    batching on, and ``densenet_batch`` as the samples write it (row cache on)."""
    root = tmp_path_factory.mktemp("rows") / "repo"
    for sample in ("simple", "simple_string", "densenet_batch"):
        config = (model_repository / sample / "config.pbtxt").read_text()
        write_variant(root, model_repository, sample, sample, config)
        if sample != "densenet_batch":
            rows_config = config + BATCHING + ROW_CACHE
            write_variant(root, model_repository, sample, f"{sample}_rows", rows_config)
    return root


@pytest.fixture(scope="module")
def row_server(
    row_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """One server for the module's tests: each reads the figures of a model no other sends."""
    server = ServerProcess(
        ["--model-repository", str(row_repository)], tmp_path_factory.mktemp("row-server")
    )
    server.start()
    yield server
    server.stop()


def batch(sample: str, count: int, seed: int) -> dict[str, np.ndarray]:
    """``count`` random rows of the sample's inputs."""
    rng = np.random.default_rng(seed)
    if sample == "densenet_batch":
        return {"data_0": rng.standard_normal((count, 3, 224, 224), dtype=np.float32)}
    numbers = {
        n: rng.integers(-999, 999, (count, 16), dtype=np.int32) for n in ("INPUT0", "INPUT1")
    }
    if sample == "simple":
        return numbers
    as_bytes = np.vectorize(lambda value: str(value).encode(), otypes=[object])
    return {name: as_bytes(array) for name, array in numbers.items()}


def pick(feed: dict[str, np.ndarray], rows: list[int]) -> dict[str, np.ndarray]:
    return {name: array[rows] for name, array in feed.items()}


def onnx_runtime(model_file: Path, feed: dict[str, np.ndarray]) -> dict[str, bytes]:
    """ONNX Runtime's own answer for the whole batch, as canonical bytes per output."""
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    strings = np.vectorize(lambda value: value.decode(), otypes=[object])
    ort_feed = {n: strings(a) if a.dtype == object else a for n, a in feed.items()}
    results = session.run(None, ort_feed)
    return {
        out.name: Tensor.from_numpy(out.name, value).data
        for out, value in zip(session.get_outputs(), results, strict=True)
    }


@pytest.mark.parametrize(
    ("model", "sample"),
    [
        ("simple_rows", "simple"),
        ("simple_string_rows", "simple_string"),
        ("densenet_batch", "densenet_batch"),
    ],
)
def test_partly_cached_batch_is_partial_with_every_row_in_place(
    row_server: ServerProcess, model_repository: Path, model: str, sample: str
) -> None:
    rows = batch(sample, 6, seed=13)
    model_file = model_repository / sample / "1" / "model.onnx"
    status, x_cache, _ = post_binary(row_server, model, pick(rows, [0, 1]))
    assert (status, x_cache) == (200, "miss")
    assert metric(row_server, ROW_MISSES, model) == 2

    mixed = [2, 1, 3, 0]  # two rows cached, two new, in a new order
    status, x_cache, outputs = post_binary(row_server, model, pick(rows, mixed))
    assert (status, x_cache) == (200, "partial")
    assert outputs == onnx_runtime(model_file, pick(rows, mixed)), "assembled == whole batch"
    assert metric(row_server, ROW_HITS, model) == 2
    assert metric(row_server, ROW_MISSES, model) == 4

    every_row_cached = [3, 2, 1]
    status, x_cache, outputs = post_binary(row_server, model, pick(rows, every_row_cached))
    assert (status, x_cache) == (200, "hit-local")
    assert outputs == onnx_runtime(model_file, pick(rows, every_row_cached))
    assert metric(row_server, ROW_HITS, model) == 5

    status, x_cache, repeated = post_binary(row_server, model, pick(rows, mixed))
    assert (status, x_cache) == (200, "hit-local")
    assert repeated == onnx_runtime(model_file, pick(rows, mixed))
    assert metric(row_server, ROW_HITS, model) == 5, "an exact repeat is one whole-request lookup"

    status, x_cache, _ = post_binary(row_server, model, pick(rows, [0]))
    assert (status, x_cache) == (200, "hit-local"), "a one-row request is its own row"


def test_models_without_the_switch_cache_whole_requests_only(row_server: ServerProcess) -> None:
    rows = batch("simple", 3, seed=5)
    assert post_binary(row_server, "simple", pick(rows, [0, 1]))[1] == "miss"
    assert post_binary(row_server, "simple", pick(rows, [0, 2]))[1] == "miss"
    assert metric(row_server, ROW_MISSES, "simple") == 0


def test_the_row_cache_models_setting_turns_it_on(
    make_server: Callable[..., ServerProcess], row_repository: Path
) -> None:
    """What the operator sets for ``spec.model.rowCache``: no config.pbtxt change needed."""
    server = make_server("--row-cache-models", "simple", repository=row_repository)
    rows = batch("simple", 3, seed=8)
    assert post_binary(server, "simple", pick(rows, [0, 1]))[1] == "miss"
    assert post_binary(server, "simple", pick(rows, [1, 2]))[1] == "partial"
    assert post_binary(server, "simple_string", pick(batch("simple_string", 2, 8), [0, 1]))[1] == (
        "miss"
    )


def test_rows_come_from_redis_in_one_lookup(
    make_server: Callable[..., ServerProcess],
    row_repository: Path,
    redis_server: RedisProcess,
    model_repository: Path,
) -> None:
    server = make_server(
        "--cache", "redis", "--redis-url", redis_server.url, repository=row_repository
    )
    rows = batch("simple", 4, seed=21)
    assert post_binary(server, "simple_rows", pick(rows, [0, 1]))[1] == "miss"
    client = redis_server.client()
    # Write-behind: two row entries and the whole request's entry reach Redis after the answer.
    wait_for(lambda: client.dbsize() == 3, "three entries in Redis", 30)
    status, x_cache, outputs = post_binary(server, "simple_rows", pick(rows, [1, 0]))
    assert (status, x_cache) == (200, "hit-redis")
    expected = onnx_runtime(model_repository / "simple" / "1" / "model.onnx", pick(rows, [1, 0]))
    assert outputs == expected
    assert post_binary(server, "simple_rows", pick(rows, [2, 1]))[1] == "partial"
    assert metric(server, ROW_HITS, "simple_rows") == 3
