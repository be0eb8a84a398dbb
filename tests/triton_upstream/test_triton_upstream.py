"""cachefleet in front of real Triton: the ``tritonserver`` of the ``nvidia-pytriton`` wheel, as
the benchmark's peer runs it (``bench/triton_peer.py``), serving ``simple`` with its own local
response cache, and ``cachefleet serve --upstream grpc://...`` in front of it.

A step of its own (``bash scripts/test-triton-upstream``, which installs the peer's venv): the
wheel is large, and the README's test command has no time left for it. What a Triton user
notices: the same tensors as Triton alone, byte for byte, from ``tritonclient`` over HTTP
(JSON and the binary extension) and gRPC, and from the calls and checks of Triton's own example
clients; hits that Triton's own statistics never see; ``perf_analyzer`` through the front,
clean; the repository read from Triton through its restricted endpoints with the token from a
file. (A reload on Triton: ``test_triton_reload.py``, on a bare tritonserver.)
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import loopback
from support.processes import ServerProcess, upstream_front
from support.sample_requests import simple_inputs, success_count
from tritonclient.utils import InferenceServerException

from cachefleet.bench import perf_analyzer, triton_peer
from cachefleet.bench.processes import ManagedProcess

TOKEN = "a-triton-access-token-for-the-test"
#: The JSON form of ``simple_inputs(httpclient, 3, second=9)``.
BODY = {
    "inputs": [
        {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(3, 19))},
        {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [9] * 16},
    ]
}
#: PyTriton's token header over gRPC (``triton-grpc-protocol-`` + its HTTP header's name).
TOKEN_HEADER = "triton-grpc-protocol-triton-access-token"


@pytest.fixture(scope="module")
def triton(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ManagedProcess, str, str]]:
    """Real Triton serving ``simple``: the process, its HTTP ``host:port`` and gRPC's."""
    logs = tmp_path_factory.mktemp("triton")
    (logs / "token").write_text(TOKEN + "\n")
    process, base_url, _, grpc_url = triton_peer.start(
        model_repository, ["simple"], None, logs, None, access_token_file=logs / "token"
    )
    yield process, base_url.removeprefix("http://"), grpc_url
    process.stop()


@pytest.fixture(scope="module")
def front(
    triton: tuple[ManagedProcess, str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    with upstream_front(
        f"grpc://{triton[2]}",
        tmp_path_factory.mktemp("front"),
        "--upstream-models",
        "simple",
        auth=(TOKEN_HEADER, TOKEN),
    ) as server:
        yield server


def tensors(result: Any) -> dict[str, bytes]:
    return {name: result.as_numpy(name).tobytes() for name in ("OUTPUT0", "OUTPUT1")}


def test_tritonclient_gets_tritons_answers_and_hits_never_reach_triton(
    triton: tuple[ManagedProcess, str, str], front: ServerProcess
) -> None:
    _, triton_http, triton_grpc = triton
    alone = httpclient.InferenceServerClient(triton_http)
    through = httpclient.InferenceServerClient(front.url)
    for binary in (False, True):
        expected = tensors(
            alone.infer("simple", simple_inputs(httpclient, 3, second=9, binary=binary))
        )
        for _ in range(2):
            got = through.infer("simple", simple_inputs(httpclient, 3, second=9, binary=binary))
            assert tensors(got) == expected
    token = {TOKEN_HEADER: TOKEN}
    expected_grpc = grpcclient.InferenceServerClient(triton_grpc).infer(
        "simple", simple_inputs(grpcclient, 20, second=9), headers=token
    )
    grpc_front = grpcclient.InferenceServerClient(front.grpc_url)
    for _ in range(2):
        got = grpc_front.infer("simple", simple_inputs(grpcclient, 20, second=9)).get_response()
        assert list(got.raw_output_contents) == list(
            expected_grpc.get_response().raw_output_contents
        )

    # Cached here (Triton's config enables response_cache): Triton never sees the hits.
    computed = success_count(triton_http, "simple")
    for _ in range(5):
        answer = loopback.post(f"{front.base_url}/v2/models/simple/infer", json=BODY, timeout=60)
        assert answer.headers["x-cache"] == "hit-local"
        grpc_front.infer("simple", simple_inputs(grpcclient, 20, second=9))
    assert success_count(triton_http, "simple") == computed

    # The model came from Triton (PyTriton's index lists none: --upstream-models names it),
    # its restricted endpoints read with the token from the file.
    index = loopback.post(f"{front.base_url}/v2/repository/index", timeout=30).json()
    assert {"name": "simple", "version": "1", "state": "READY"} in index
    config = loopback.get(f"{front.base_url}/v2/models/simple/config", timeout=30).json()
    assert config["response_cache"]["enable"] is True
    assert config["parameters"]["cachefleet.fingerprint"]["string_value"]
    assert TOKEN not in front.log()


def example_http_calls(address: str) -> list[dict[str, bytes]]:
    """The calls and checks of Triton's example ``simple_http_infer_client.py``, against the
    server at ``address``: INPUT0 as JSON and INPUT1 binary, OUTPUT0 asked for in binary and
    OUTPUT1 as JSON, with query parameters; then no outputs named; the statistics of the model;
    an unknown model's error. The tensors of both answers."""
    client = httpclient.InferenceServerClient(address)
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.full((1, 16), -1, dtype=np.int32)
    inputs = [httpclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(first, binary_data=False)
    inputs[1].set_data_from_numpy(second, binary_data=True)
    outputs = [
        httpclient.InferRequestedOutput("OUTPUT0", binary_data=True),
        httpclient.InferRequestedOutput("OUTPUT1", binary_data=False),
    ]
    params = {"test_1": 1, "test_2": 2}
    answers = []
    for named in (outputs, None):
        result = client.infer("simple", inputs, outputs=named, query_params=params)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
        answers.append(tensors(result))
    assert len(client.get_inference_statistics(model_name="simple")["model_stats"]) == 1
    with pytest.raises(InferenceServerException) as raised:
        client.infer("wrong_model_name", inputs, outputs=outputs)
    assert raised.value.message().startswith("Request for unknown model")
    return answers


def example_grpc_calls(address: str, headers: dict[str, str]) -> list[dict[str, bytes]]:
    """The calls and checks of Triton's example ``simple_grpc_infer_client.py``: with both
    outputs named and a header, then with none; the statistics of the model."""
    client = grpcclient.InferenceServerClient(address)
    first = np.arange(16, dtype=np.int32).reshape(1, 16)
    second = np.ones((1, 16), dtype=np.int32)
    inputs = [grpcclient.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(first)
    inputs[1].set_data_from_numpy(second)
    outputs = [grpcclient.InferRequestedOutput(name) for name in ("OUTPUT0", "OUTPUT1")]
    answers = []
    for named, sent in ((outputs, {"test": "1", **headers}), (None, headers)):
        result = client.infer("simple", inputs, outputs=named, headers=sent)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), first + second)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), first - second)
        answers.append(tensors(result))
    statistics = client.get_inference_statistics(model_name="simple", headers=headers)
    assert len(statistics.model_stats) == 1
    return answers


def test_tritons_example_clients_get_the_same_answers_through_the_cache(
    triton: tuple[ManagedProcess, str, str], front: ServerProcess
) -> None:
    _, triton_http, triton_grpc = triton
    alone_http = example_http_calls(triton_http)
    alone_grpc = example_grpc_calls(triton_grpc, {TOKEN_HEADER: TOKEN})
    assert example_http_calls(front.url) == alone_http  # misses, forwarded to Triton
    assert example_grpc_calls(front.grpc_url, {}) == alone_grpc
    computed = success_count(triton_http, "simple")
    assert example_http_calls(front.url) == alone_http  # hits: Triton computes nothing
    assert example_grpc_calls(front.grpc_url, {}) == alone_grpc
    assert success_count(triton_http, "simple") == computed


def server_figure(report: str, name: str) -> int:
    """A count of perf_analyzer's server-side section (``Cache hit count: 12``)."""
    found = re.search(rf"{name} count: ([0-9]+)", report)
    assert found is not None, f"no {name!r} count in perf_analyzer's server section:\n{report}"
    return int(found.group(1))


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_through_the_front_runs_clean_and_its_hits_never_reach_triton(
    triton: tuple[ManagedProcess, str, str], front: ServerProcess, protocol: str
) -> None:
    """Triton's perf_analyzer, as a Triton user runs it, pointed at cachefleet in front of
    Triton: it finishes without an error, and its server-side section (read from our statistics
    extension) counts the hits; Triton computed only the few first misses."""
    _, triton_http, _ = triton
    address = front.url if protocol == "http" else front.grpc_url
    computed = success_count(triton_http, "simple")
    arguments = perf_analyzer.command("simple", address, protocol, concurrency=2, window_ms=500)
    result = perf_analyzer.run_command(arguments, None, timeout_s=180)
    assert result.requests > 0
    report = result.server_report
    hits, misses = (server_figure(report, name) for name in ("Cache hit", "Cache miss"))
    assert hits > 0, report
    # perf_analyzer repeats one random input: at most one miss per connection before the first
    # answer is cached, each one request to Triton (or fewer: single-flight).
    assert misses <= 2, report
    assert success_count(triton_http, "simple") - computed <= 2
