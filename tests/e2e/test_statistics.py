"""Triton's statistics extension, read with the real tritonclient.http from a real server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from support.processes import ServerProcess
from tritonclient.utils import InferenceServerException

#: Uses the DenseNet samples: the whole sample repository (tests/conftest.py).
pytestmark = pytest.mark.full_samples


@pytest.fixture
def client(sample_server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    triton = httpclient.InferenceServerClient(sample_server.url)
    yield triton
    triton.close()


def _simple(
    client: httpclient.InferenceServerClient,
    first: np.ndarray,
    second: np.ndarray,
    headers: dict[str, str] | None = None,
) -> None:
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", second)):
        infer_input = httpclient.InferInput(name, list(array.shape), "INT32")
        infer_input.set_data_from_numpy(array)
        inputs.append(infer_input)
    result = client.infer("simple", inputs, headers=headers)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)


def _only(document: dict[str, Any]) -> dict[str, Any]:
    (stats,) = document["model_stats"]
    return dict(stats)


def _counts(stats: dict[str, Any]) -> dict[str, int]:
    return {phase: value["count"] for phase, value in stats["inference_stats"].items()}


def test_every_loaded_model_is_listed_in_tritons_shape(
    client: httpclient.InferenceServerClient,
) -> None:
    document = client.get_inference_statistics()
    listed = {(stats["name"], stats["version"]) for stats in document["model_stats"]}
    assert listed == {
        (name, "1")
        for name in (
            "densenet_batch",
            "densenet_onnx",
            "simple",
            "simple_identity",
            "simple_int8",
            "simple_string",
        )
    }
    unused = _only(client.get_inference_statistics("simple_int8"))
    phases = ["success", "fail", "queue", "compute_input", "compute_infer", "compute_output"]
    assert _counts(unused) == dict.fromkeys([*phases, "cache_hit", "cache_miss"], 0)
    assert (unused["inference_count"], unused["execution_count"]) == (0, 0)
    assert unused["batch_stats"] == []


def test_hits_misses_failures_and_executions_are_counted(
    client: httpclient.InferenceServerClient,
) -> None:
    first = np.arange(32, dtype=np.int32).reshape(2, 16)
    second = np.full((2, 16), 3, dtype=np.int32)
    _simple(client, first, second)  # miss: the model runs on 2 rows
    _simple(client, first, second)  # hit
    _simple(client, first, second)  # hit
    _simple(client, first, second + 1, headers={"Cache-Control": "no-store"})  # bypass: runs
    bad = httpclient.InferInput("INPUT0", [1, 15], "INT32")
    bad.set_data_from_numpy(np.zeros((1, 15), dtype=np.int32))
    with pytest.raises(InferenceServerException, match="shape"):
        client.infer("simple", [bad])

    stats = _only(client.get_inference_statistics("simple", "1"))
    counts = _counts(stats)
    assert (counts["success"], counts["fail"]) == (4, 1)
    assert (counts["cache_hit"], counts["cache_miss"]) == (2, 1)
    assert (stats["execution_count"], stats["inference_count"]) == (2, 4)
    # As in Triton (and as perf_analyzer, which finds the model by it, needs): every successful
    # request is in ``queue``, cache hits too; only the two that ran the model in ``compute_*``.
    assert counts["queue"] == counts["success"] == 4
    for phase in ("compute_input", "compute_infer", "compute_output"):
        assert counts[phase] == 2, phase
    batches = [
        (batch["batch_size"], batch["compute_infer"]["count"]) for batch in stats["batch_stats"]
    ]
    assert batches == [(2, 2)], "two executions of two rows each"
    for phase in ("success", "fail", "compute_infer", "cache_hit", "cache_miss"):
        assert stats["inference_stats"][phase]["ns"] > 0, phase
    assert stats["last_inference"] > 0
    assert _only(client.get_inference_statistics("simple")) == stats


def test_unknown_model_or_version_is_an_error(client: httpclient.InferenceServerClient) -> None:
    with pytest.raises(InferenceServerException, match="no_such_model") as error:
        client.get_inference_statistics("no_such_model")
    assert error.value.status() == "404"
    with pytest.raises(InferenceServerException, match="version 9"):
        client.get_inference_statistics("simple", "9")
