"""Single-flight per row on a real server and real ONNX Runtime: two batches missing the same
row run it once (read from the server's own execution counters), and a batch whose computation
fails sends the batches waiting on its rows off to run them themselves instead of hanging them
or failing them with its error.

The ``picker`` model (``support.batching``) waits in its batch queue until three rows are
there, so that the order of events is set by the requests, not by time: the server's
``nv_inference_pending_request_count`` says when each computation has arrived in the queue."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.batching import (
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
)
from support.processes import ServerProcess

MODEL = "picker_rows"
WAIT_FOR_THREE = wait_for_three()
ROW_CACHE = (
    "response_cache { enable: true }\n"
    'parameters { key: "cachefleet.row_cache" value { string_value: "true" } }\n'
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("row-flight") / "repo"
    write_picker(root, MODEL, picker_config(MODEL, batching=WAIT_FOR_THREE, extra=ROW_CACHE))
    return root


@pytest.fixture
def server(make_server: Callable[..., ServerProcess], rows_repository: Path) -> ServerProcess:
    return make_server(repository=rows_repository)


def test_a_row_two_batches_miss_together_runs_once(server: ServerProcess) -> None:
    first = InFlight(server, MODEL, pick_body(0, 1))
    wait_pending(server, MODEL, 1)  # rows 0 and 1 wait in the queue for a third
    # Row 1 is the first batch's to compute: this batch sends only row 2, the third row.
    second = InFlight(server, MODEL, pick_body(1, 2))

    status, _, answer = first.wait()
    assert (status, values(answer)) == (200, [TABLE[0], TABLE[1]])
    status, _, answer = second.wait()
    assert (status, values(answer)) == (200, [TABLE[1], TABLE[2]])
    assert metric(server, "nv_inference_count", MODEL) == 3, "row 1 ran once"
    assert metric(server, "nv_inference_exec_count", MODEL) == 1
    assert metric(server, "cachefleet_cache_row_misses_total", MODEL) == 3
    assert metric(server, "cachefleet_cache_row_coalesced_total", MODEL) == 1
    # As for a whole request answered by one in flight: neither a hit nor a miss for Triton
    # (two whole-request misses, three rows run).
    assert metric(server, "nv_cache_num_misses_per_model", MODEL) == 5
    assert metric(server, "nv_cache_num_hits_per_model", MODEL) == 0


def test_a_batch_whose_computation_fails_leaves_no_one_waiting(server: ServerProcess) -> None:
    failing = InFlight(server, MODEL, pick_body(1, 99))  # 99 is outside the table: Gather fails
    wait_pending(server, MODEL, 1)
    # Waits for the failing batch's row 1 and sends row 2: three rows go, and fail together;
    # the batcher runs each request alone again, and only the failing batch fails.
    follower = InFlight(server, MODEL, pick_body(1, 2))
    status, _, answer = failing.wait()
    assert status == 500
    assert "idx=99" in answer["error"]

    # The row it waited for was never computed: the follower runs it itself, not taking the
    # failing batch's error for its own.
    wait_pending(server, MODEL, 1)
    other = InFlight(server, MODEL, pick_body(3, 0))  # two more rows: a batch of three goes
    status, _, answer = follower.wait()
    assert (status, values(answer)) == (200, [TABLE[1], TABLE[2]])
    status, _, answer = other.wait()
    assert (status, values(answer)) == (200, [TABLE[3], TABLE[0]])
    assert metric(server, "cachefleet_cache_row_coalesced_total", MODEL) == 0
    # Rows 2 and 1 in another order: each from the row cache.
    assert post(server, MODEL, pick_body(2, 1))[1] == "hit-local", "the follower's rows kept"
