"""Dynamic batching on a real server and real ONNX Runtime: concurrent misses share executions
(read from the server's own metrics), the queue delay and preferred sizes decide when a batch
goes, a request the model cannot run fails alone, and a client that hangs up does not cancel
the batch the others wait on. Requests are put in the queue one by one (the server's
``nv_inference_pending_request_count`` says when each has arrived), so nothing here is timed."""

from __future__ import annotations

import concurrent.futures
import json
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from support.batching import (
    FOREVER_US,
    TABLE,
    InFlight,
    metric,
    pick_body,
    picker_config,
    post,
    values,
    wait_for_three,
    wait_pending,
    write_picker,
    write_variant,
)
from support.processes import ServerProcess
from support.waiting import wait_for

from cachefleet.runtime.samples.densenet import DENSENET_BATCH_CONFIG

WAIT_FOR_THREE = wait_for_three()
EXECUTIONS = "nv_inference_exec_count"
ROWS = "nv_inference_count"
PENDING = "cachefleet_queue_pending"


pytestmark = [pytest.mark.slow, pytest.mark.full_samples]


@pytest.fixture(scope="module")
def batching_repository(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("batching") / "repo"
    write_picker(root, "picker", picker_config("picker", batching=WAIT_FOR_THREE))
    write_picker(
        root,
        "picker_cached",
        picker_config(
            "picker_cached", batching=WAIT_FOR_THREE, extra="response_cache { enable: true }"
        ),
    )
    write_picker(
        root,
        "picker_short",
        picker_config(
            "picker_short",
            batching="dynamic_batching { preferred_batch_size: [ 3 ]"
            " max_queue_delay_microseconds: 1000 }",
        ),
    )
    slow = DENSENET_BATCH_CONFIG.replace(
        "dynamic_batching { max_queue_delay_microseconds: 2000 }",
        "dynamic_batching { preferred_batch_size: [ 8 ] max_queue_delay_microseconds:"
        f" {FOREVER_US} }}",
    )
    write_variant(root, model_repository, "densenet_batch", "densenet_wait8", slow)
    write_variant(root, model_repository, "densenet_batch", "densenet_batch", DENSENET_BATCH_CONFIG)
    simple = (model_repository / "simple" / "config.pbtxt").read_text()
    write_variant(
        root,
        model_repository,
        "simple",
        "simple_batched",
        simple + "dynamic_batching { max_queue_delay_microseconds: 2000 }\n",
    )
    return root


PICKERS = ("picker", "picker_cached", "picker_short")


@pytest.fixture
def batching_server(
    make_server: Callable[..., ServerProcess], batching_repository: Path
) -> ServerProcess:
    """A server of the picker models only: the DenseNets' sessions would double its start."""
    loads = [arg for name in PICKERS for arg in ("--load-model", name)]
    return make_server("--model-control-mode", "explicit", *loads, repository=batching_repository)


@pytest.fixture
def densenet_server(
    make_server: Callable[..., ServerProcess], batching_repository: Path
) -> ServerProcess:
    """A server of every model of the batching repository, the DenseNets included."""
    return make_server(repository=batching_repository)


def test_concurrent_misses_run_as_one_execution(batching_server: ServerProcess) -> None:
    first = InFlight(batching_server, "picker", pick_body(0))
    wait_pending(batching_server, "picker", 1)
    second = InFlight(batching_server, "picker", pick_body(1, 2))  # three rows: a preferred size
    answers = [first.wait(), second.wait()]
    assert [(status, x_cache) for status, x_cache, _ in answers] == [(200, "bypass")] * 2
    assert values(answers[0][2]) == [TABLE[0]]
    assert values(answers[1][2]) == [TABLE[1], TABLE[2]]
    assert answers[1][2]["outputs"][0]["shape"] == [2, 1]
    assert metric(batching_server, EXECUTIONS, "picker") == 1
    assert metric(batching_server, ROWS, "picker") == 3
    assert metric(batching_server, "cachefleet_inference_batch_size_sum", "picker") == 3
    assert metric(batching_server, "nv_inference_request_success", "picker") == 2


def test_requests_accepted_and_not_answered_are_pending(batching_server: ServerProcess) -> None:
    """``cachefleet_queue_pending``, what autoscaling on ``queue`` reads, rises with every
    request the server holds and falls back to 0 when they are answered."""
    assert metric(batching_server, PENDING, "picker") == 0
    waiting = [InFlight(batching_server, "picker", pick_body(index)) for index in (0, 1)]
    wait_pending(batching_server, "picker", 2)
    assert metric(batching_server, PENDING, "picker") == 2
    waiting.append(InFlight(batching_server, "picker", pick_body(2)))  # completes the batch
    assert [request.wait()[0] for request in waiting] == [200] * 3
    assert metric(batching_server, PENDING, "picker") == 0


def test_a_lone_request_waits_for_the_queue_delay(batching_server: ServerProcess) -> None:
    """With a delay that never ends, a request waits for company; with a short one, it runs
    alone once the delay has passed."""
    lone = InFlight(batching_server, "picker", pick_body(3))
    wait_pending(batching_server, "picker", 1)
    assert lone.result is None
    assert metric(batching_server, EXECUTIONS, "picker") == 0
    company = [InFlight(batching_server, "picker", pick_body(index)) for index in (0, 1)]
    assert values(lone.wait()[2]) == [TABLE[3]]
    assert [values(request.wait()[2]) for request in company] == [[TABLE[0]], [TABLE[1]]]
    assert metric(batching_server, EXECUTIONS, "picker") == 1

    status, _, answer = post(batching_server, "picker_short", pick_body(2))
    assert (status, values(answer)) == (200, [TABLE[2]])
    assert metric(batching_server, EXECUTIONS, "picker_short") == 1
    assert metric(batching_server, ROWS, "picker_short") == 1


def test_a_batch_goes_at_the_preferred_size_not_the_maximum(batching_server: ServerProcess) -> None:
    """Preferred size 3, max_batch_size 8: the third request starts a batch of 3 at once, and
    the fourth waits for two more."""
    sent = []
    for index in range(4):
        sent.append(InFlight(batching_server, "picker", pick_body(index)))
        wait_pending(batching_server, "picker", (index + 1) % 3)
    assert [values(request.wait()[2]) for request in sent[:3]] == [[v] for v in TABLE[:3]]
    assert sent[3].result is None
    sent += [InFlight(batching_server, "picker", pick_body(0, 1))]
    assert values(sent[3].wait()[2]) == [TABLE[3]]
    assert values(sent[4].wait()[2]) == [TABLE[0], TABLE[1]]
    assert metric(batching_server, EXECUTIONS, "picker") == 2
    assert metric(batching_server, "cachefleet_inference_batch_size_count", "picker") == 2
    assert metric(batching_server, "cachefleet_inference_batch_size_sum", "picker") == 6


@pytest.mark.parametrize("model", ["picker", "picker_cached"])
def test_a_request_the_model_cannot_run_fails_alone(
    batching_server: ServerProcess, model: str
) -> None:
    good = InFlight(batching_server, model, pick_body(1))
    wait_pending(batching_server, model, 1)
    bad = InFlight(batching_server, model, pick_body(99))  # outside the table: Gather fails
    wait_pending(batching_server, model, 2)
    other = InFlight(batching_server, model, pick_body(2))
    assert (good.wait()[0], values(good.wait()[2])) == (200, [TABLE[1]])
    assert (other.wait()[0], values(other.wait()[2])) == (200, [TABLE[2]])
    status, _, answer = bad.wait()
    assert status == 500
    assert f"model {model!r}" in answer["error"]
    assert "idx=99" in answer["error"], "the model's own error, about this request"
    assert metric(batching_server, "nv_inference_request_failure", model) == 1
    assert metric(batching_server, "nv_inference_request_success", model) == 2
    if model == "picker_cached":  # the good answers were cached
        assert post(batching_server, model, pick_body(1))[1] == "hit-local"


def _send_and_hang_up_later(
    server: ServerProcess, model: str, body: dict[str, object]
) -> socket.socket:
    """A raw HTTP request whose client can go away before the answer."""
    payload = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(
        f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n".encode()
        + payload
    )
    return sock


@pytest.mark.parametrize("model", ["picker", "picker_cached"])
def test_a_client_that_hangs_up_while_queued_is_dropped(
    batching_server: ServerProcess, model: str
) -> None:
    gone = _send_and_hang_up_later(batching_server, model, pick_body(3))
    wait_pending(batching_server, model, 1)
    staying = InFlight(batching_server, model, pick_body(0))
    wait_pending(batching_server, model, 2)
    gone.close()
    wait_pending(batching_server, model, 1)  # the request of the client that went is dropped
    more = InFlight(batching_server, model, pick_body(1, 2))
    assert values(staying.wait()[2]) == [TABLE[0]]
    assert values(more.wait()[2]) == [TABLE[1], TABLE[2]]
    assert metric(batching_server, ROWS, model) == 3, "the dropped request never ran"
    assert "Exception in ASGI application" not in batching_server.log(), "a hang-up is no error"


def test_a_client_that_hangs_up_does_not_cancel_a_running_batch(
    densenet_server: ServerProcess,
) -> None:
    rng = np.random.default_rng(7)
    images = rng.standard_normal((8, 3, 224, 224), dtype=np.float32)

    def body(rows: np.ndarray) -> dict[str, object]:
        return {
            "inputs": [
                {"name": "data_0", "datatype": "FP32", "shape": list(rows.shape),
                 "data": rows.ravel().tolist()}
            ]
        }  # fmt: skip

    gone = _send_and_hang_up_later(densenet_server, "densenet_wait8", body(images[:1]))
    wait_pending(densenet_server, "densenet_wait8", 1)
    staying = InFlight(densenet_server, "densenet_wait8", body(images[1:]))

    def running() -> bool:  # taken from the queue, not finished yet
        pending = metric(densenet_server, "nv_inference_pending_request_count", "densenet_wait8")
        return pending == 0 and metric(densenet_server, EXECUTIONS, "densenet_wait8") == 0

    wait_for(running, "the batch of 8 to start", 60)
    gone.close()
    status, _, answer = staying.wait()
    assert status == 200
    session = ort.InferenceSession(
        str(densenet_server.args[1] + "/densenet_wait8/1/model.onnx"),
        providers=["CPUExecutionProvider"],
    )
    expected = session.run(None, {"data_0": images})[0][1:]
    got = np.asarray(answer["outputs"][0]["data"], dtype=np.float32).reshape(expected.shape)
    assert np.array_equal(got, expected)
    assert metric(densenet_server, EXECUTIONS, "densenet_wait8") == 1
    assert metric(densenet_server, ROWS, "densenet_wait8") == 8


@pytest.mark.parametrize(
    ("model", "sample"), [("densenet_batch", "densenet_batch"), ("simple_batched", "simple")]
)
def test_every_answer_equals_onnx_runtime_on_the_sample_file(
    densenet_server: ServerProcess, model_repository: Path, model: str, sample: str
) -> None:
    """16 concurrent single-row clients, as the benchmark runs them: fewer executions than
    requests, and each answer has the bytes ONNX Runtime gives for that row on the sample's own
    model file. (On this CPU, DenseNet's kernels give the same bits at every batch size: see the
    row cache in docs/guide/cache.md. Should a machine differ, this is the assertion that says
    so.)"""
    rng = np.random.default_rng(16)
    feeds: list[dict[str, np.ndarray]]
    if sample == "densenet_batch":
        feeds = [
            {"data_0": rng.standard_normal((1, 3, 224, 224), dtype=np.float32)} for _ in range(16)
        ]
    else:
        feeds = [
            {
                name: rng.integers(-1000, 1000, (1, 16), dtype=np.int32)
                for name in ("INPUT0", "INPUT1")
            }
            for _ in range(16)
        ]
    session = ort.InferenceSession(
        str(model_repository / sample / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )

    def ask(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        client = httpclient.InferenceServerClient(densenet_server.url)
        try:
            inputs = []
            for name, array in feed.items():
                infer_input = httpclient.InferInput(
                    name, list(array.shape), "FP32" if array.dtype == np.float32 else "INT32"
                )
                infer_input.set_data_from_numpy(array)
                inputs.append(infer_input)
            result = client.infer(model, inputs, headers={"Cache-Control": "no-store"})
            return {out.name: result.as_numpy(out.name) for out in session.get_outputs()}
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, feeds))
    for feed, answer in zip(feeds, answers, strict=True):
        expected = session.run(None, feed)
        for output, want in zip(session.get_outputs(), expected, strict=True):
            assert answer[output.name].tobytes() == want.tobytes(), output.name
    assert metric(densenet_server, ROWS, model) == 16
    assert metric(densenet_server, EXECUTIONS, model) < 16
