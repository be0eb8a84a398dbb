"""The HTTP floor: a bare uvicorn app answering the bench's simple request as our server does.

Real processes: our server answers first, the floor is started from what it answered, then both
are asked the same request and must answer the same bytes.
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import pytest
from support.processes import ServerProcess

from cachefleet.bench import http_floor, perf_analyzer
from cachefleet.bench.measure import request_set, warm
from cachefleet.bench.processes import ManagedProcess
from cachefleet.bench.scenarios import Scenario

SIMPLE_HIT = Scenario("hits", "simple", "local", 1.0)


def _ask(
    base_url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    host, _, port = base_url.removeprefix("http://").partition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def floor(
    sample_server: ServerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ManagedProcess, str]]:
    """The floor, from what the module's server (local cache) answered once warmed."""
    requests = request_set(sample_server.base_url, SIMPLE_HIT)
    warm(sample_server.base_url, requests, SIMPLE_HIT)
    answers = http_floor.capture(sample_server.base_url, requests)
    process, base_url = http_floor.start(answers, tmp_path_factory.mktemp("floor"), cpus=None)
    yield process, base_url
    process.stop()


def test_the_floor_answers_the_simple_request_with_our_servers_bytes(
    sample_server: ServerProcess, floor: tuple[ManagedProcess, str]
) -> None:
    server, (_, floor_url) = sample_server, floor
    requests = request_set(server.base_url, SIMPLE_HIT)
    for body in (requests.hit_bodies[0], requests.hit_bodies[5]):
        ours = _ask(server.base_url, "POST", requests.path, body, dict(requests.headers))
        theirs = _ask(floor_url, "POST", requests.path, body, dict(requests.headers))
        assert ours[0] == theirs[0] == 200
        if body == requests.hit_bodies[0]:
            assert theirs[2] == ours[2]  # the very bytes, binary outputs included
        else:
            assert len(theirs[2]) == len(ours[2])  # canned: one answer for every input
        for header in ("content-type", "inference-header-content-length", "x-cache"):
            assert theirs[1].get(header) == ours[1].get(header), header
        assert theirs[1]["content-length"] == str(len(theirs[2]))
    # What a load generator reads first answers as our server does; anything else is a 404.
    for path in ("/v2/health/ready", "/v2/models/simple", "/v2/models/simple/config"):
        assert _ask(floor_url, "GET", path)[2] == _ask(server.base_url, "GET", path)[2], path
    assert _ask(floor_url, "GET", "/v2/models/densenet_onnx")[0] == 404
    # The bench's own request set can be built from the floor's canned metadata.
    assert request_set(floor_url, SIMPLE_HIT).hit_bodies == requests.hit_bodies


@pytest.mark.skipif(not perf_analyzer.available(), reason="perf_analyzer is not installed")
def test_perf_analyzer_measures_the_floor(floor: tuple[ManagedProcess, str]) -> None:
    _, floor_url = floor
    address = floor_url.removeprefix("http://")
    arguments = perf_analyzer.command("simple", address, "http", concurrency=2, window_ms=300)
    measured = perf_analyzer.run_command(arguments, cpus=None, timeout_s=60)
    assert measured.requests > 0
