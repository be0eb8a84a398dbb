"""cachefleet in front of real Triton: the ``tritonserver`` of the ``nvidia-pytriton`` wheel, as
the benchmark's peer runs it (``bench/triton_peer.py``), serving ``simple`` with its own local
response cache, and ``cachefleet serve --upstream grpc://...`` in front of it.

A step of its own (``bash scripts/test-triton-upstream``, which installs the peer's venv): the
wheel is large, and the README's test command has no time left for it. What a Triton user
notices: the same tensors as Triton alone, byte for byte, from ``tritonclient`` over HTTP
(JSON and the binary extension) and gRPC; hits that Triton's own statistics never see; the
repository read from Triton through its restricted endpoints with the token from a file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import loopback
from support.processes import ServerProcess, upstream_front
from support.sample_requests import simple_inputs, success_count

from cachefleet.bench import triton_peer
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
