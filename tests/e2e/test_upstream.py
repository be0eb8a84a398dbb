"""Upstream mode against a real upstream: ``cachefleet serve --upstream grpc://...`` in front of
a second ``cachefleet serve --cache none`` (a KServe v2 / Triton-compatible server that caches
nothing), each a real process on loopback ports, one pair per module.

What a user of the front notices: the same answers as the upstream alone, byte for byte, over
HTTP JSON, the binary extension and gRPC; hits that never reach the upstream (read from the
upstream's own statistics); a reload or a new version on the upstream never answered from the
old entries; and an upstream that is paused or killed answered with a clear 503 / UNAVAILABLE
within the deadline, while the cache keeps serving its hits and readiness follows the
upstream's. The fault test runs last: it stops and restarts the module's upstream.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from support import loopback
from support.processes import ServerProcess, upstream_front
from support.sample_requests import simple_inputs, success_count
from support.waiting import wait_for
from tritonclient.utils import InferenceServerException

from cachefleet.runtime.samples.arithmetic import build_simple
from cachefleet.runtime.samples.onnx_build import make_model

pytestmark = pytest.mark.slow

#: The front's deadline for one forwarded inference, short so that the paused upstream is
#: answered for well within the clients' own (generous) timeouts below.
INFER_DEADLINE_S = 3
CLIENT_TIMEOUT_S = 120.0
FINGERPRINT = "cachefleet.fingerprint"
#: Every gRPC group of the upstream needs this token (Triton's restricted-protocol syntax).
RESTRICTED = "health,metadata,inference,model-config,model-repository,statistics"
TOKEN_KEY = "upstream-token"
TOKEN = "s3cret-upstream-token-4711"


def swapped_simple() -> bytes:
    """``simple`` with its outputs swapped: same signature, OUTPUT0 is the difference."""
    graph = build_simple().graph
    for node in graph.node:
        node.output[0] = {"OUTPUT0": "OUTPUT1", "OUTPUT1": "OUTPUT0"}[node.output[0]]
    return make_model(graph).SerializeToString()


@pytest.fixture(scope="module")
def upstream_repository(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the light samples that the reload test may change."""
    folder = tmp_path_factory.mktemp("upstream") / "repo"
    shutil.copytree(model_repository, folder)
    return folder


@pytest.fixture(scope="module")
def upstream(
    upstream_repository: Path, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The upstream: gRPC over TLS, every gRPC group behind a token (its HTTP port, which only
    the test itself uses, stays plain)."""
    server = ServerProcess(
        ["--model-repository", str(upstream_repository), "--cache", "none",
         "--model-control-mode", "explicit", "--load-model", "*",
         "--grpc-use-ssl", "--grpc-server-cert", str(certificates / "node.crt"),
         "--grpc-server-key", str(certificates / "node.key"),
         "--grpc-restricted-protocol", f"{RESTRICTED}:{TOKEN_KEY}={TOKEN}"],
        tmp_path_factory.mktemp("upstream-log"),
    )  # fmt: skip
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def front(
    upstream: ServerProcess, certificates: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The server under test, in front of the upstream; the token comes from a file, as from a
    mounted Secret (with its trailing newline)."""
    with upstream_front(
        f"grpcs://{upstream.grpc_url}", tmp_path_factory.mktemp("front-log"),
        "--upstream-tls-ca-file", str(certificates / "ca.crt"), "--cache-all-models",
        "--upstream-timeout", str(INFER_DEADLINE_S), "--upstream-control-timeout", "2",
        "--upstream-refresh", "0.3",
        auth=(f"triton-grpc-protocol-{TOKEN_KEY}", TOKEN),
    ) as server:  # fmt: skip
        yield server


@pytest.fixture(scope="module")
def http_front(
    upstream: ServerProcess, upstream_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A second server under test, reaching the same upstream over plain HTTP, and seeing its
    model repository (``--upstream-model-repository``: the files go into its keys)."""
    with upstream_front(
        upstream.base_url, tmp_path_factory.mktemp("http-front-log"), "--cache-all-models",
        "--upstream-model-repository", str(upstream_repository),
        "--upstream-timeout", str(INFER_DEADLINE_S), "--upstream-control-timeout", "2",
        "--upstream-refresh", "0.3",
    ) as server:  # fmt: skip
        yield server


def upstream_grpc(upstream: ServerProcess, certificates: Path) -> grpcclient.InferenceServerClient:
    """A client of the upstream alone, over its TLS."""
    root = str(certificates / "ca.crt")
    return grpcclient.InferenceServerClient(upstream.grpc_url, ssl=True, root_certificates=root)


def simple_json(seed: int) -> dict[str, Any]:
    first = list(range(seed, seed + 16))
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": first},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [3] * 16},
        ]
    }


def post_json(server: ServerProcess, model: str, body: dict[str, Any]) -> httpx.Response:
    return loopback.post(
        f"{server.base_url}/v2/models/{model}/infer", json=body, timeout=CLIENT_TIMEOUT_S
    )


def binary_body(inputs: list[httpclient.InferInput]) -> tuple[bytes, dict[str, str]]:
    """A request as tritonclient.http sends it (binary tensor extension), as raw bytes."""
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs)
    headers = {"Content-Type": "application/octet-stream"}
    if json_size is not None:
        headers["Inference-Header-Content-Length"] = str(json_size)
    return body, headers


def post_binary(
    server: ServerProcess, model: str, body: bytes, headers: dict[str, str]
) -> httpx.Response:
    url = f"{server.base_url}/v2/models/{model}/infer"
    return loopback.post(url, content=body, headers=headers, timeout=CLIENT_TIMEOUT_S)


def identity_inputs(elements: list[bytes]) -> list[httpclient.InferInput]:
    tensor = httpclient.InferInput("INPUT0", [1, len(elements)], "BYTES")
    tensor.set_data_from_numpy(np.array([elements], dtype=object))
    return [tensor]


def test_answers_through_the_cache_are_the_upstreams_byte_for_byte(
    upstream: ServerProcess, front: ServerProcess, certificates: Path
) -> None:
    # HTTP JSON: the first answer is the upstream's computation, the second a hit; both are
    # the upstream's own answer to the same body, byte for byte.
    alone = post_json(upstream, "simple", simple_json(7))
    assert alone.status_code == 200, alone.text
    missed, hit = (
        post_json(front, "simple", simple_json(7)),
        post_json(front, "simple", simple_json(7)),
    )
    assert (missed.headers["x-cache"], hit.headers["x-cache"]) == ("miss", "hit-local")
    assert missed.content == hit.content == alone.content

    # The binary extension, with BYTES elements (non-ASCII, empty, with a zero byte).
    elements = ["héllo".encode(), b"", b"a\x00b", b"x" * 300]
    body, headers = binary_body(identity_inputs(elements))
    alone = post_binary(upstream, "simple_identity", body, headers)
    assert alone.status_code == 200, alone.text
    answers = [post_binary(front, "simple_identity", body, headers) for _ in range(2)]
    assert [answer.headers["x-cache"] for answer in answers] == ["miss", "hit-local"]
    assert all(answer.content == alone.content for answer in answers)
    ints = binary_body(simple_inputs(httpclient, 11, second=2))
    assert (
        post_binary(front, "simple", *ints).content
        == post_binary(upstream, "simple", *ints).content
    )

    # gRPC through real tritonclient: the same raw output contents as the upstream's.
    token = {f"triton-grpc-protocol-{TOKEN_KEY}": TOKEN}
    expected = upstream_grpc(upstream, certificates).infer(
        "simple", simple_inputs(grpcclient, 40, second=5), headers=token
    )
    client = grpcclient.InferenceServerClient(front.grpc_url)
    for _ in range(2):
        got = client.infer("simple", simple_inputs(grpcclient, 40, second=5)).get_response()
        assert list(got.raw_output_contents) == list(expected.get_response().raw_output_contents)
        assert got.outputs == expected.get_response().outputs

    # A hit never reaches the upstream: its own statistics do not move, ours count the hits.
    computed = success_count(upstream.url, "simple")
    for _ in range(5):
        assert post_json(front, "simple", simple_json(7)).headers["x-cache"] == "hit-local"
        client.infer("simple", simple_inputs(grpcclient, 40, second=5))
    assert success_count(upstream.url, "simple") == computed
    stats = httpclient.InferenceServerClient(front.url).get_inference_statistics("simple")
    assert int(stats["model_stats"][0]["inference_stats"]["cache_hit"]["count"]) >= 10

    # An error the upstream answers keeps its code and message, over both transports.
    bad = binary_body(identity_inputs([b"\xff\xfe"]))
    alone, through = (
        post_binary(upstream, "simple_identity", *bad),
        post_binary(front, "simple_identity", *bad),
    )
    assert through.status_code == alone.status_code == 400
    assert through.json() == alone.json()
    grpc_bad = grpcclient.InferInput("INPUT0", [1, 1], "BYTES")
    grpc_bad.set_data_from_numpy(np.array([[b"\xff\xfe"]], dtype=object))
    with pytest.raises(InferenceServerException) as raised:
        client.infer("simple_identity", [grpc_bad])
    assert raised.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert raised.value.message() == alone.json()["error"]

    # The index, metadata and config are the upstream's.
    index = loopback.post(f"{front.base_url}/v2/repository/index", timeout=30).json()
    assert index == loopback.post(f"{upstream.base_url}/v2/repository/index", timeout=30).json()
    metadata = loopback.get(f"{front.base_url}/v2/models/simple", timeout=30).json()
    assert metadata == loopback.get(f"{upstream.base_url}/v2/models/simple", timeout=30).json()


def front_fingerprint(front: ServerProcess) -> str:
    """The fingerprint the server keys ``simple``'s entries with (its config's parameter)."""
    config = loopback.get(f"{front.base_url}/v2/models/simple/config", timeout=30).json()
    return str(config["parameters"][FINGERPRINT]["string_value"])


def load_on_upstream(upstream: ServerProcess) -> None:
    answer = loopback.post(
        f"{upstream.base_url}/v2/repository/models/simple/load", timeout=CLIENT_TIMEOUT_S
    )
    assert answer.status_code == 200, answer.text


def test_a_reload_on_the_upstream_is_never_answered_from_the_previous_entries(
    upstream: ServerProcess,
    front: ServerProcess,
    http_front: ServerProcess,
    upstream_repository: Path,
) -> None:
    body = simple_json(100)
    first = post_json(front, "simple", body)
    assert post_json(front, "simple", body).headers["x-cache"] == "hit-local"
    assert first.json()["outputs"][0]["data"] == [a + 3 for a in range(100, 116)]  # the sum
    before, shared_before = front_fingerprint(front), front_fingerprint(http_front)
    assert before != shared_before  # the shared files are in the second front's identity

    # Other files under the same name and version. The front that shares the repository sees
    # them at once; the other one sees nothing until the upstream reloads them.
    (upstream_repository / "simple" / "1" / "model.onnx").write_bytes(swapped_simple())
    wait_for(lambda: front_fingerprint(http_front) != shared_before, "the files to be seen", 30)
    assert front_fingerprint(front) == before
    # Reloaded on the upstream: its reported config changes (its fingerprint parameter), so
    # the front's key does too.
    load_on_upstream(upstream)
    wait_for(lambda: front_fingerprint(front) != before, "the front to see the reload", 30)
    after = post_json(front, "simple", body)
    assert after.headers["x-cache"] == "miss"
    assert after.json()["outputs"][0]["data"] == [a - 3 for a in range(100, 116)]  # the difference
    assert after.content == post_json(upstream, "simple", body).content

    # A new version folder: the upstream serves version 2 only (version_policy latest), and so
    # does the front, from its own entries of version 2.
    shutil.copytree(upstream_repository / "simple" / "1", upstream_repository / "simple" / "2")
    (upstream_repository / "simple" / "2" / "model.onnx").write_bytes(
        build_simple().SerializeToString()
    )
    load_on_upstream(upstream)

    def versions() -> list[str]:
        return list(
            loopback.get(f"{front.base_url}/v2/models/simple", timeout=30).json()["versions"]
        )

    wait_for(lambda: versions() == ["2"], "the front to serve version 2 alone", 30)
    newest = post_json(front, "simple", body)
    assert (newest.headers["x-cache"], newest.json()["model_version"]) == ("miss", "2")
    assert newest.json()["outputs"][0]["data"] == [a + 3 for a in range(100, 116)]
    assert newest.content == post_json(upstream, "simple", body).content


def test_an_http_upstream_answers_the_same_through_the_binary_extension(
    upstream: ServerProcess, http_front: ServerProcess
) -> None:
    front = http_front
    alone = post_json(upstream, "simple", simple_json(900))
    answers = [post_json(front, "simple", simple_json(900)) for _ in range(2)]
    assert [answer.headers["x-cache"] for answer in answers] == ["miss", "hit-local"]
    assert all(answer.content == alone.content for answer in answers)
    body, headers = binary_body(identity_inputs(["héllo".encode(), b"", b"a\x00b"]))
    through = post_binary(front, "simple_identity", body, headers)
    assert through.content == post_binary(upstream, "simple_identity", body, headers).content
    computed = success_count(upstream.url, "simple")
    assert post_json(front, "simple", simple_json(900)).headers["x-cache"] == "hit-local"
    assert success_count(upstream.url, "simple") == computed
    bad = binary_body(identity_inputs([b"\xff\xfe"]))
    refused = post_binary(front, "simple_identity", *bad)
    assert (refused.status_code, refused.json()) == (
        400, post_binary(upstream, "simple_identity", *bad).json(),
    )  # fmt: skip
    versions = loopback.get(f"{front.base_url}/v2/models/simple", timeout=30).json()
    assert versions == loopback.get(f"{upstream.base_url}/v2/models/simple", timeout=30).json()


def ready(server: ServerProcess) -> int:
    return loopback.get(f"{server.base_url}/v2/health/ready", timeout=30).status_code


def readiness(servers: tuple[ServerProcess, ...]) -> set[int]:
    """The readiness status codes the servers answer now."""
    return {ready(server) for server in servers}


def circuit_open(servers: tuple[ServerProcess, ...]) -> set[float]:
    """The ``cachefleet_upstream_circuit_open`` values the servers' /metrics give now."""
    values = set()
    for server in servers:
        text = loopback.get(f"{server.base_url}/metrics", timeout=30).text
        values |= {
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == "cachefleet_upstream_circuit_open"
        }
    return values


class Load:
    """Distinct misses sent one after another through ``front`` until stopped (at most
    ``limit``), each answer's status and error text kept: the load a fault lands in."""

    def __init__(self, front: ServerProcess, first_seed: int, limit: int = 5000) -> None:
        self.outcomes: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(front, first_seed, limit))
        self._thread.start()

    def _run(self, front: ServerProcess, first_seed: int, limit: int) -> None:
        for seed in range(first_seed, first_seed + limit):
            if self._stop.is_set():
                return
            answer = post_json(front, "simple", simple_json(seed))
            error = answer.json().get("error", "") if answer.status_code != 200 else ""
            self.outcomes.append((answer.status_code, error))

    def refused(self) -> list[str]:
        return [error for status, error in self.outcomes if status == 503]

    def stop(self) -> list[tuple[int, str]]:
        self._stop.set()
        self._thread.join(CLIENT_TIMEOUT_S)
        assert not self._thread.is_alive(), "a request through the front hangs"
        return self.outcomes


def test_a_paused_or_killed_upstream_is_a_clear_503_and_the_hits_keep_coming(
    upstream: ServerProcess, front: ServerProcess, http_front: ServerProcess
) -> None:
    fronts = (front, http_front)
    warm = simple_json(500)
    for server in fronts:
        post_json(server, "simple", warm)
        assert post_json(server, "simple", warm).headers["x-cache"] == "hit-local"
    grpc_front = grpcclient.InferenceServerClient(front.grpc_url)
    assert circuit_open(fronts) == {0.0}

    # Paused mid-load: the misses in flight, and those after, end at the deadline with a 503
    # that says so; nothing hangs, hits are served all along, readiness follows the upstream.
    loads = [Load(server, 10_000 * (n + 1)) for n, server in enumerate(fronts)]
    wait_for(lambda: all(load.outcomes for load in loads), "the load to be answered", 60)
    os.kill(upstream.pid, signal.SIGSTOP)
    try:
        for load in loads:
            wait_for(load.refused, "a miss in flight to be refused", 60)
        for server in fronts:
            assert post_json(server, "simple", warm).headers["x-cache"] == "hit-local"
        with pytest.raises(InferenceServerException) as raised:
            grpc_front.infer(
                "simple", simple_inputs(grpcclient, 700, second=5), client_timeout=CLIENT_TIMEOUT_S
            )
        assert raised.value.status() == "StatusCode.UNAVAILABLE"
        wait_for(lambda: readiness(fronts) == {503}, "readiness to follow the paused upstream", 60)
        # Deadlines that pass count as unreachable: the breaker opens, and /metrics says so.
        wait_for(lambda: circuit_open(fronts) == {1.0}, "the gauge to show the open breaker", 60)
    finally:
        os.kill(upstream.pid, signal.SIGCONT)
    for load in loads:
        outcomes = load.stop()
        assert {status for status, _ in outcomes} <= {200, 503}
        for error in load.refused():
            assert "did not answer within" in error or "unreachable" in error, error
    wait_for(lambda: readiness(fronts) == {200}, "readiness to come back with the upstream", 60)
    wait_for(lambda: circuit_open(fronts) == {0.0}, "the gauge to show the breaker closed", 60)
    for server in fronts:
        assert post_json(server, "simple", simple_json(601)).status_code == 200

    # Killed mid-load: misses are refused at once (the breaker stops asking), hits are still
    # answered, readiness says the upstream is gone, and all of it comes back with it.
    loads = [Load(server, 50_000 * (n + 1)) for n, server in enumerate(fronts)]
    wait_for(lambda: all(load.outcomes for load in loads), "the load to be answered", 60)
    os.kill(upstream.pid, signal.SIGKILL)
    assert upstream.process is not None
    upstream.process.wait(CLIENT_TIMEOUT_S)
    wait_for(lambda: all(len(load.refused()) >= 5 for load in loads), "refused misses", 60)
    # Refused without trying, once the breaker has opened.
    opened = lambda: all(any("circuit open" in e for e in load.refused()) for load in loads)  # noqa: E731
    wait_for(opened, "the breaker to open", 60)
    wait_for(lambda: circuit_open(fronts) == {1.0}, "the gauge to show the open breaker", 60)
    for server in fronts:
        assert post_json(server, "simple", warm).headers["x-cache"] == "hit-local"
    wait_for(lambda: readiness(fronts) == {503}, "readiness to follow the killed upstream", 60)
    for load in loads:
        assert {status for status, _ in load.stop()} <= {200, 503}
    upstream.start()
    wait_for(lambda: readiness(fronts) == {200}, "readiness once the upstream is back", 60)
    wait_for(lambda: circuit_open(fronts) == {0.0}, "the gauge to show the breaker closed", 60)
    for server in fronts:
        assert post_json(server, "simple", simple_json(801)).status_code == 200
        assert "Traceback" not in server.log(), server.log()[-3000:]
    # The token went to the upstream on every call (it answered), and nowhere else.
    metrics = loopback.get(f"{front.base_url}/metrics", timeout=30).text
    assert TOKEN not in front.log() + metrics
