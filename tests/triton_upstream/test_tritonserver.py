"""cachefleet in front of real Triton run as its users run it: a reload on Triton is never
answered from the previous model's entries, and a fleet of replicas computes each distinct
request once on it.

Real ``tritonserver`` (the ``nvidia-pytriton`` wheel's binary, ``support.tritonserver``) with
``--model-control-mode=explicit`` on a model repository of its own: ``simple`` as a Python
backend model (``OUTPUT0`` the sum plus an offset the test changes, ``OUTPUT1`` the difference).

Reloads: two servers in front of it, one over gRPC that sees only what Triton reports, one over
HTTP that also shares Triton's model repository (``--upstream-model-repository``, the operator's
layout). Each change is made as a Triton user makes it (files in the repository, then Triton's
own ``POST /v2/repository/models/simple/load``, not through cachefleet), and each is checked as
the upstream guide's identity section says (docs/guide/upstream.md): a new version folder and a
changed config are seen by both fronts; a model file replaced in place under the same version
and config is seen by the front that shares the folder, and not by the other, whose flush is the
remedy.

The fleet: three replicas with ``--cache tiered`` on one real Redis, a burst of a few distinct
inputs over all of them while Triton is paused (``support.upstream_fleet``); Triton's own
statistics count one execution per distinct input.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support import loopback, tritonserver
from support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from support.processes import RedisProcess, ServerProcess
from support.upstream_fleet import burst_while_paused, executed, leases
from support.waiting import wait_for

CONFIG = """\
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] }
]
instance_group [ { kind: KIND_CPU count: 1 } ]
"""
#: ``simple`` on Triton's Python backend; the sum's offset from the config's ``offset``
#: parameter when it has one, else the file's own.
MODEL = """\
import json

import triton_python_backend_utils as pb_utils

OFFSET = {offset}


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {{}})
        self.offset = int(parameters.get("offset", {{}}).get("string_value", OFFSET))

    def execute(self, requests):
        answers = []
        for request in requests:
            first = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            second = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", first + second + self.offset),
                       pb_utils.Tensor("OUTPUT1", first - second)]
            answers.append(pb_utils.InferenceResponse(outputs))
        return answers
"""
SEED = 40
REPLICAS = 3
DISTINCT = 5
#: Outlasts the pause and the burst on a loaded machine (``support.upstream_fleet``).
MAX_WAIT_S = "120"
FINGERPRINT = "cachefleet.fingerprint"


def write_model(folder: Path, offset: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.py").write_text(MODEL.format(offset=offset))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("triton-repository")
    (root / "simple").mkdir()
    (root / "simple" / "config.pbtxt").write_text(CONFIG)
    write_model(root / "simple" / "1", offset=0)
    return root


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    """Where Triton and the fronts send their spans."""
    with otlp_receiver() as started:
        yield started


@pytest.fixture(scope="module")
def triton(
    repository: Path, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tritonserver.Tritonserver]:
    """Triton in explicit model control, tracing every request with OpenTelemetry (which reads
    the ``traceparent`` of a request, header or gRPC metadata)."""
    collector = receiver.endpoint.removeprefix("http://")
    tracing = [
        "--trace-config=mode=opentelemetry", "--trace-config=rate=1",
        "--trace-config=level=TIMESTAMPS",
        f"--trace-config=opentelemetry,url={collector}/v1/traces",
        "--trace-config=opentelemetry,bsp_schedule_delay=50",
    ]  # fmt: skip
    server = tritonserver.start(
        repository,
        tmp_path_factory.mktemp("tritonserver"),
        ["--model-control-mode=explicit", "--load-model=simple", "--log-verbose=0", *tracing],
        ready_model="simple",
    )
    yield server
    server.stop()


@pytest.fixture(scope="module")
def fronts(
    triton: tritonserver.Tritonserver,
    repository: Path,
    receiver: OtlpReceiver,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, ServerProcess]]:
    """``reported``: over gRPC, identity from what Triton reports; ``shared``: over HTTP, with
    Triton's repository in its identity too. Both trace to the receiver."""
    logs = tmp_path_factory.mktemp("fronts")
    common = ["--cache-all-models", "--upstream-refresh", "0.3"]
    tracing = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
    servers = {
        "reported": ServerProcess(
            ["--upstream", f"grpc://{triton.grpc}", *common],
            logs,
            env={**tracing, "OTEL_SERVICE_NAME": "front-reported"},
        ),
        "shared": ServerProcess(
            [
                "--upstream",
                f"http://{triton.http}",
                "--upstream-model-repository",
                str(repository),
                *common,
            ],
            logs,
            env={**tracing, "OTEL_SERVICE_NAME": "front-shared"},
        ),
    }
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(), servers.values()))
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def body(seed: int) -> dict[str, Any]:
    return {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16],
             "data": list(range(seed, seed + 16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [9] * 16},
        ]
    }  # fmt: skip


def expected(offset: int) -> list[int]:
    return [value + 9 + offset for value in range(SEED, SEED + 16)]


def ask(
    address: str, seed: int = SEED, headers: dict[str, str] | None = None
) -> tuple[str, str, list[int]]:
    """X-Cache (none from Triton), model_version and the sum, for ``body(seed)``."""
    url = f"http://{address}/v2/models/simple/infer"
    answer = loopback.post(url, json=body(seed), headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    document = answer.json()
    sums = next(o["data"] for o in document["outputs"] if o["name"] == "OUTPUT0")
    return answer.headers.get("x-cache", ""), document["model_version"], sums


def fingerprint(front: ServerProcess) -> str:
    config = loopback.get(f"{front.base_url}/v2/models/simple/config", timeout=30).json()
    return str(config["parameters"][FINGERPRINT]["string_value"])


def versions(front: ServerProcess) -> list[str]:
    return list(loopback.get(f"{front.base_url}/v2/models/simple", timeout=30).json()["versions"])


def serves_only(front: ServerProcess, wanted: list[str]) -> Callable[[], bool]:
    return lambda: versions(front) == wanted


def moved(front: ServerProcess, before: str) -> Callable[[], bool]:
    """Whether ``front``'s fingerprint of ``simple`` is no longer ``before``."""
    return lambda: fingerprint(front) != before


def load_on_triton(triton: tritonserver.Tritonserver) -> None:
    """Triton's own model control, as a Triton user reloads a model."""
    url = f"http://{triton.http}/v2/repository/models/simple/load"
    answer = loopback.post(url, timeout=120)
    assert answer.status_code == 200, answer.text


def test_a_reload_on_triton_is_answered_by_the_new_model(
    triton: tritonserver.Tritonserver, fronts: dict[str, ServerProcess], repository: Path
) -> None:
    reported, shared = fronts["reported"], fronts["shared"]
    both = (reported, shared)
    for front in both:
        assert [ask(front.url) for _ in range(2)] == [
            ("miss", "1", expected(0)),
            ("hit-local", "1", expected(0)),
        ]

    # A new version folder, loaded by Triton: version 2 alone (version_policy latest), answered
    # by it, under keys of its own.
    write_model(repository / "simple" / "2", offset=1000)
    load_on_triton(triton)
    assert ask(triton.http) == ("", "2", expected(1000))
    for front in both:
        wait_for(serves_only(front, ["2"]), "version 2 alone", 60)
        assert ask(front.url) == ("miss", "2", expected(1000))
        assert ask(front.url) == ("hit-local", "2", expected(1000))

    # The model file replaced in place (same version, same config), then reloaded by Triton.
    before = {name: fingerprint(front) for name, front in fronts.items()}
    write_model(repository / "simple" / "2", offset=2000)
    load_on_triton(triton)
    assert ask(triton.http) == ("", "2", expected(2000))
    # The front that shares the folder hashes the new file: a new key, the new model's answer.
    wait_for(moved(shared, before["shared"]), "the new file in the key", 60)
    assert ask(shared.url) == ("miss", "2", expected(2000))
    # The other sees nothing of it: name, version, state and config are what they were, so its
    # key is too, and the previous answer is still served, as the guide says. Its remedy is a
    # flush of the model after such a reload.
    assert fingerprint(reported) == before["reported"]
    assert ask(reported.url) == ("hit-local", "2", expected(1000))
    flushed = loopback.post(f"{reported.base_url}/v2/models/simple/cache/flush", timeout=30)
    assert flushed.status_code == 200, flushed.text
    assert ask(reported.url) == ("miss", "2", expected(2000))

    # A changed config (a parameter the model reads), reloaded by Triton: seen by both fronts.
    before = {name: fingerprint(front) for name, front in fronts.items()}
    config = repository / "simple" / "config.pbtxt"
    config.write_text(CONFIG + 'parameters { key: "offset" value { string_value: "3000" } }\n')
    load_on_triton(triton)
    assert ask(triton.http) == ("", "2", expected(3000))
    for name, front in fronts.items():
        wait_for(moved(front, before[name]), "the new config", 60)
        assert ask(front.url) == ("miss", "2", expected(3000))
        assert ask(front.url) == ("hit-local", "2", expected(3000))
    for front in both:
        assert "Traceback" not in front.log(), front.log()[-3000:]


@pytest.fixture(scope="module")
def fleet(
    triton: tritonserver.Tritonserver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    """Three replicas in front of Triton, sharing one Redis."""
    logs = tmp_path_factory.mktemp("triton-fleet")
    redis = RedisProcess(tmp_path_factory.mktemp("triton-fleet-redis"))
    args = ["--upstream", f"grpc://{triton.grpc}", "--cache", "tiered", "--cache-all-models",
            "--redis-url", redis.url, "--cache-fleet-max-wait", MAX_WAIT_S,
            "--upstream-timeout", MAX_WAIT_S, "--upstream-control-timeout", MAX_WAIT_S]  # fmt: skip
    replicas = [ServerProcess(args, logs) for _ in range(REPLICAS)]
    try:
        redis.start()
        with ThreadPoolExecutor(REPLICAS) as pool:
            list(pool.map(lambda replica: replica.start(), replicas))
        yield replicas
    finally:
        for replica in replicas:
            replica.stop()
        redis.stop()


def test_a_fleet_in_front_of_triton_computes_each_distinct_request_once(
    triton: tritonserver.Tritonserver, fleet: list[ServerProcess]
) -> None:
    seeds = [5000 + 41 * n for n in range(DISTINCT)]
    before = executed(triton.http, "simple")
    pid = triton.process.pid
    answers = burst_while_paused(pid, fleet, "simple", seeds, per_replica=2)
    grew = [now - then for now, then in zip(executed(triton.http, "simple"), before, strict=True)]
    assert grew == [DISTINCT] * 3, "Triton's execution_count, inference_count, successes"
    assert len(answers) == REPLICAS * DISTINCT * 2
    for seed in seeds:
        assert len({body for s, body, _ in answers if s == seed}) == 1, "one answer per input"
    assert leases(fleet, "simple") == DISTINCT


def test_tritons_trace_joins_the_callers_through_the_front(
    fronts: dict[str, ServerProcess], receiver: OtlpReceiver
) -> None:
    """The caller's traceparent, through the front (its request span, its call's span) into
    Triton's own OpenTelemetry spans: Triton's request span is a child of the front's call.
    Over HTTP: Triton 2.51's gRPC front end leaves some requests out of the caller's trace (it
    starts one of its own) whoever sends the traceparent (tritonclient too), after a reload most
    often; that the gRPC client sends it is tested against a cachefleet upstream
    (tests/e2e/test_tracing.py)."""
    trace_id, caller = os.urandom(16).hex(), os.urandom(8).hex()
    front = fronts["shared"]
    status, _, _ = ask(front.url, 7100, {"traceparent": f"00-{trace_id}-{caller}-01"})
    assert status == "miss"

    def spans() -> tuple[list[ReceivedSpan], list[ReceivedSpan]] | None:
        """The front's two spans and Triton's, once Triton's child of the front's call came."""
        found = [s for s in receiver.received() if s.trace_id == trace_id]
        ours = [s for s in found if s.resource.get("service.name") == "front-shared"]
        theirs = [s for s in found if s.resource.get("service.name") != "front-shared"]
        calls = {s.span_id for s in ours if s.kind == "SPAN_KIND_CLIENT"}
        joined = any(s.parent_span_id in calls for s in theirs)
        return (ours, theirs) if len(ours) == 2 and joined else None

    found = wait_for(spans, "Triton's span under the front's call", 60)
    assert found is not None
    ours, theirs = found
    by_kind = {s.kind: s for s in ours}
    request, call = by_kind["SPAN_KIND_SERVER"], by_kind["SPAN_KIND_CLIENT"]
    assert request.parent_span_id == caller
    assert call.parent_span_id == request.span_id
    assert {s.resource.get("service.name") for s in theirs} == {"triton-inference-server"}
    (outermost,) = [s for s in theirs if s.parent_span_id == call.span_id]
    assert outermost.name == "InferRequest"
