"""Tracing on a real server: each inference request, over HTTP and gRPC, arrives at a real OTLP
receiver on loopback as one server span under the caller's traceparent, saying which model and
version answered, how the cache answered, and the queue and compute time; failures end in
status ERROR. With the exporter turned off nothing is sent and nothing is set up. In upstream
mode the forwarded call is a client span whose traceparent the upstream (a second traced server)
joins."""

from __future__ import annotations

import os
import queue
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from support import loopback
from support.otlp_receiver import OtlpReceiver, ReceivedSpan, otlp_receiver
from support.processes import ServerProcess
from support.sample_requests import memo_figures
from support.waiting import wait_for
from tritonclient.utils import InferenceServerException


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with otlp_receiver() as started:
        yield started


def tracing_env(receiver: OtlpReceiver, **extra: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_SERVICE_NAME": "traced-simple",
        "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment.name=test",
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # milliseconds: the tests need not wait 5 s
        **extra,
    }


@pytest.fixture(scope="module")
def traced_server(
    model_repository: Path, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """The sample repository, local cache, ``simple``'s rows cached one by one (for partial)."""
    server = ServerProcess(
        ["--model-repository", str(model_repository), "--row-cache-models", "simple"],
        tmp_path_factory.mktemp("traced"),
        env=tracing_env(receiver),
    )
    server.start()
    yield server
    server.stop()


class Caller:
    """A caller's span: the traceparent it sends, and the ids a child of it must carry."""

    def __init__(self) -> None:
        self.trace_id = os.urandom(16).hex()
        self.span_id = os.urandom(8).hex()
        self.headers = {"traceparent": f"00-{self.trace_id}-{self.span_id}-01"}

    def children(self, receiver: OtlpReceiver, count: int) -> list[ReceivedSpan]:
        """The ``count`` spans of this trace the receiver got, in the order they started."""

        def arrived() -> list[ReceivedSpan]:
            spans = [s for s in receiver.received() if s.trace_id == self.trace_id]
            return spans if len(spans) >= count else []

        spans = wait_for(arrived, f"{count} span(s) of trace {self.trace_id}", timeout_s=20)
        assert len(spans) == count, spans
        for span in spans:
            assert span.parent_span_id == self.span_id, "the caller's span is the parent"
            assert span.kind == "SPAN_KIND_SERVER"
        return sorted(spans, key=lambda s: s.start_ns)


def simple_inputs(module: object, rows: int, seed: int) -> list[object]:
    first = np.arange(16 * rows, dtype=np.int32).reshape(rows, 16) + seed
    inputs = []
    for name, array in (("INPUT0", first), ("INPUT1", np.ones_like(first))):
        item = module.InferInput(name, list(array.shape), "INT32")  # type: ignore[attr-defined]
        item.set_data_from_numpy(array)
        inputs.append(item)
    return inputs


def http_infer(server: ServerProcess, caller: Caller, rows: np.ndarray) -> None:
    client = httpclient.InferenceServerClient(server.url)
    inputs = []
    for name, array in (("INPUT0", rows), ("INPUT1", np.ones_like(rows))):
        item = httpclient.InferInput(name, list(array.shape), "INT32")
        item.set_data_from_numpy(array, binary_data=True)
        inputs.append(item)
    # A copy: tritonclient.http adds its own headers to the dict it is given.
    client.infer("simple", inputs, headers=dict(caller.headers))


def test_http_requests_are_spans_under_the_callers_trace(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    caller = Caller()
    numbers = np.arange(16, dtype=np.int32).reshape(1, 16) + 1000
    memo_hits = memo_figures(traced_server)["cachefleet_cache_tier_hits_total"]
    for _ in range(3):  # a miss, a hit, and a hit from the memo of rendered responses
        http_infer(traced_server, caller, numbers)
    spans = caller.children(receiver, 3)
    assert memo_figures(traced_server)["cachefleet_cache_tier_hits_total"] == memo_hits + 1
    assert [s.attributes["cachefleet.cache.result"] for s in spans] == [
        "miss",
        "hit-local",
        "hit-local",
    ]
    miss, hit, _ = spans
    for span in spans:
        assert span.name == "POST /v2/models/{model}/infer"
        assert span.status == "STATUS_CODE_UNSET"
        assert span.attributes["cachefleet.model.name"] == "simple"
        # The path names no version: the one that answered, the memo's hit's too.
        assert span.attributes["cachefleet.model.version"] == "1"
        assert span.attributes["cachefleet.transport"] == "http"
        assert span.attributes["http.request.method"] == "POST"
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["url.path"] == "/v2/models/simple/infer"
        assert span.resource["service.name"] == "traced-simple"
        assert span.resource["deployment.environment.name"] == "test"
        assert span.end_ns >= span.start_ns
    assert miss.attributes["cachefleet.compute.duration"] > 0
    assert miss.attributes["cachefleet.queue.duration"] >= 0
    assert hit.attributes["cachefleet.cache.tier"] == "local"
    assert "cachefleet.compute.duration" not in hit.attributes, "a hit runs no model"


def test_grpc_requests_are_spans_under_the_callers_trace(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    caller = Caller()
    client = grpcclient.InferenceServerClient(traced_server.grpc_url)
    memo_hits = memo_figures(traced_server)["cachefleet_cache_tier_hits_total"]
    for _ in range(3):  # a miss, a hit, and a hit from the memo, answered on the call's thread
        client.infer("simple", simple_inputs(grpcclient, 1, 2000), headers=caller.headers)
    miss, hit, memo_hit = caller.children(receiver, 3)
    assert memo_figures(traced_server)["cachefleet_cache_tier_hits_total"] == memo_hits + 1
    assert miss.attributes["cachefleet.cache.result"] == "miss"
    assert hit.attributes["cachefleet.cache.result"] == "hit-local"
    assert memo_hit.attributes["cachefleet.cache.result"] == "hit-local"
    assert memo_hit.attributes["cachefleet.cache.tier"] == "local"
    for span in (miss, hit, memo_hit):  # ModelInfer's span starts before its model is known
        assert span.name == "inference.GRPCInferenceService/ModelInfer"
        assert span.attributes["rpc.system"] == "grpc"
        assert span.attributes["rpc.method"] == "ModelInfer"
        assert span.attributes["rpc.grpc.status_code"] == 0
        assert span.attributes["cachefleet.model.name"] == "simple"
        assert span.attributes["cachefleet.model.version"] == "1"
    assert miss.attributes["cachefleet.compute.duration"] > 0


def test_each_request_of_a_grpc_stream_is_a_span(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    caller = Caller()
    client = grpcclient.InferenceServerClient(traced_server.grpc_url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(
        callback=lambda result, error: answers.put((result, error)), headers=caller.headers
    )
    try:
        client.async_stream_infer("simple", simple_inputs(grpcclient, 1, 7000))
        client.async_stream_infer("nonexistent", simple_inputs(grpcclient, 1, 7000))
        client.async_stream_infer("simple", simple_inputs(grpcclient, 1, 7000))
        received = [answers.get(timeout=30) for _ in range(3)]
    finally:
        client.stop_stream()
    assert [error is None for _, error in received] == [True, False, True]
    spans = caller.children(receiver, 3)
    assert [s.name for s in spans] == ["inference.GRPCInferenceService/ModelStreamInfer"] * 3
    assert [s.attributes["cachefleet.model.name"] for s in spans] == [
        "simple",
        "nonexistent",
        "simple",
    ]
    assert [s.status for s in spans] == [
        "STATUS_CODE_UNSET",
        "STATUS_CODE_ERROR",
        "STATUS_CODE_UNSET",
    ]
    assert "nonexistent" in spans[1].status_message
    assert spans[0].attributes["cachefleet.model.version"] == "1"
    assert spans[0].attributes["cachefleet.cache.result"] == "miss"
    assert spans[2].attributes["cachefleet.cache.result"] == "hit-local"
    assert spans[0].attributes["cachefleet.compute.duration"] > 0, "the first one ran"
    assert "cachefleet.compute.duration" not in spans[2].attributes, "the third one was a hit"


def test_a_partly_cached_batch_is_a_partial_span(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    caller = Caller()
    rows = np.arange(16 * 3, dtype=np.int32).reshape(3, 16) + 3000
    http_infer(traced_server, caller, rows[:2])
    http_infer(traced_server, caller, rows[1:])
    first, second = caller.children(receiver, 2)
    assert first.attributes["cachefleet.cache.result"] == "miss"
    assert second.attributes["cachefleet.cache.result"] == "partial"
    assert second.attributes["cachefleet.compute.duration"] > 0, "its new row ran"


def test_failures_end_in_error_status_with_the_message(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    caller = Caller()
    response = loopback.post(
        f"{traced_server.base_url}/v2/models/nonexistent/infer",
        json={"inputs": []},
        headers=caller.headers,
    )
    assert response.status_code == 404
    bad = loopback.post(
        f"{traced_server.base_url}/v2/models/simple/infer",
        content=b"{not json",
        headers=caller.headers,
    )
    assert bad.status_code == 400
    client = grpcclient.InferenceServerClient(traced_server.grpc_url)
    with pytest.raises(InferenceServerException):
        client.infer("nonexistent", simple_inputs(grpcclient, 1, 0), headers=caller.headers)
    unknown, malformed, grpc_unknown = caller.children(receiver, 3)
    assert unknown.status == malformed.status == grpc_unknown.status == "STATUS_CODE_ERROR"
    assert unknown.attributes["http.response.status_code"] == 404
    assert unknown.attributes["error.type"] == "404"
    assert "nonexistent" in unknown.status_message
    assert malformed.attributes["http.response.status_code"] == 400
    assert grpc_unknown.attributes["rpc.grpc.status_code"] == 5  # NOT_FOUND
    assert grpc_unknown.attributes["error.type"] == "NOT_FOUND"
    assert "nonexistent" in grpc_unknown.status_message


def test_a_request_without_traceparent_starts_its_own_trace(
    traced_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    before = {s.span_id for s in receiver.received()}
    http_infer(traced_server, Caller(), np.full((1, 16), 4000, dtype=np.int32))  # flushes in order
    client = httpclient.InferenceServerClient(traced_server.url)
    client.infer("simple", simple_inputs(httpclient, 1, 4001))

    def roots() -> list[ReceivedSpan]:
        new = [s for s in receiver.received() if s.span_id not in before]
        return [s for s in new if not s.parent_span_id]

    (root,) = wait_for(roots, "a span without a parent", timeout_s=20)
    assert root.attributes["cachefleet.cache.result"] == "miss"


def test_the_spans_of_a_stopping_server_are_not_lost(
    model_repository: Path, receiver: OtlpReceiver, make_server: Callable[..., ServerProcess]
) -> None:
    # An export every minute: only the flush at shutdown can deliver these spans in time.
    server = make_server(env=tracing_env(receiver, OTEL_BSP_SCHEDULE_DELAY="60000"))
    caller = Caller()
    http_infer(server, caller, np.full((1, 16), 5000, dtype=np.int32))
    assert not [s for s in receiver.received() if s.trace_id == caller.trace_id]
    server.stop()
    caller.children(receiver, 1)


def test_with_the_exporter_turned_off_nothing_is_set_up_or_sent(
    receiver: OtlpReceiver, make_server: Callable[..., ServerProcess]
) -> None:
    """OTEL_TRACES_EXPORTER=none beats an endpoint. (Without any OTEL_* variable the server is
    built without tracing at all: tests/runtime/test_tracing_composition.py.)"""
    off = make_server(env=tracing_env(receiver, OTEL_TRACES_EXPORTER="none"))
    caller = Caller()
    http_infer(off, caller, np.full((1, 16), 6000, dtype=np.int32))
    client = grpcclient.InferenceServerClient(off.grpc_url)
    client.infer("simple", simple_inputs(grpcclient, 1, 6000), headers=caller.headers)
    off.stop()  # a server that traced would flush now
    assert not [s for s in receiver.received() if s.trace_id == caller.trace_id]
    assert "tracing requests" not in off.log()


@pytest.fixture(scope="module")
def traced_fronts(
    traced_server: ServerProcess, receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServerProcess]]:
    """Two traced servers in upstream mode in front of ``traced_server`` (which traces too):
    one reaching it over gRPC, one over HTTP."""
    logs = tmp_path_factory.mktemp("traced-fronts")
    upstreams = {"grpc": f"grpc://{traced_server.grpc_url}", "http": traced_server.base_url}
    fronts = {
        scheme: ServerProcess(
            ["--upstream", url],
            logs,
            env=tracing_env(receiver, OTEL_SERVICE_NAME=f"front-{scheme}"),
        )
        for scheme, url in upstreams.items()
    }
    try:
        with ThreadPoolExecutor(len(fronts)) as pool:
            list(pool.map(lambda front: front.start(), fronts.values()))
        yield fronts
    finally:
        for front in fronts.values():
            front.stop()


@pytest.mark.parametrize("upstream_scheme", ["grpc", "http"])
def test_the_upstream_call_is_a_span_whose_traceparent_the_upstream_joins(
    traced_fronts: dict[str, ServerProcess], receiver: OtlpReceiver, upstream_scheme: str
) -> None:
    """The caller's trace, end to end: the front's server span under the caller's, the upstream
    call a client span under it, and the upstream's own server span under that one (its
    traceparent is what the front sent, over gRPC metadata or an HTTP header). A hit calls
    nothing upstream: no client span, nothing at the upstream."""
    front = traced_fronts[upstream_scheme]
    caller = Caller()
    seed = {"grpc": 8000, "http": 8500}[upstream_scheme]  # misses at the upstream too
    numbers = np.arange(16, dtype=np.int32).reshape(1, 16) + seed
    http_infer(front, caller, numbers)  # a miss, forwarded
    http_infer(front, caller, numbers)  # a hit, here
    grpcclient.InferenceServerClient(front.grpc_url).infer(
        "simple", simple_inputs(grpcclient, 1, seed + 100), headers=caller.headers
    )  # a miss over gRPC to the front, forwarded as well

    def trace() -> list[ReceivedSpan]:
        spans = [s for s in receiver.received() if s.trace_id == caller.trace_id]
        return spans if len(spans) >= 7 else []

    spans = wait_for(trace, "the spans of both servers in the caller's trace", timeout_s=30)
    assert len(spans) == 7, spans  # 3 front requests, 2 upstream calls, 2 upstream requests
    ours = sorted(
        (s for s in spans if s.resource["service.name"] == f"front-{upstream_scheme}"),
        key=lambda s: s.start_ns,
    )
    theirs = [s for s in spans if s.resource["service.name"] == "traced-simple"]
    requests = [s for s in ours if s.kind == "SPAN_KIND_SERVER"]
    calls = [s for s in ours if s.kind == "SPAN_KIND_CLIENT"]
    assert [s.parent_span_id for s in requests] == [caller.span_id] * 3
    assert [s.attributes["cachefleet.cache.result"] for s in requests] == [
        "miss",
        "hit-local",
        "miss",
    ]
    missed = [requests[0], requests[2]]
    assert len(calls) == 2, "a hit calls nothing upstream"
    assert sorted(c.parent_span_id for c in calls) == sorted(r.span_id for r in missed)
    for call in calls:
        assert call.status == "STATUS_CODE_UNSET"
        assert call.attributes["cachefleet.model.name"] == "simple"
        assert call.attributes["cachefleet.model.version"] == "1"
        assert call.attributes["server.address"] == "127.0.0.1"
        if upstream_scheme == "grpc":
            assert call.name == "inference.GRPCInferenceService/ModelInfer"
            assert call.attributes["rpc.grpc.status_code"] == 0
        else:
            assert call.name == "POST"
            assert call.attributes["http.response.status_code"] == 200
            assert call.attributes["url.full"].endswith("/v2/models/simple/versions/1/infer")
        assert call.start_ns >= min(r.start_ns for r in missed)
    # The upstream's spans: children of the calls, as the traceparent it received said.
    assert sorted(s.parent_span_id for s in theirs) == sorted(c.span_id for c in calls)
    for upstream_span in theirs:
        assert upstream_span.kind == "SPAN_KIND_SERVER"
        assert upstream_span.attributes["cachefleet.transport"] == upstream_scheme
        assert upstream_span.attributes["cachefleet.cache.result"] == "miss"
