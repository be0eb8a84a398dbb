"""The span of an upstream call, made where the call is (a model thread of the real scheduler):
a child of the traced request it serves, carrying that child's traceparent; for a batch of the
dynamic batcher, one span under the oldest request, linked to the others; none at all when no
request is traced. Spans go to OpenTelemetry's in-memory exporter."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cachefleet.runtime.errors import NotReadyError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.scheduling import BatchingPolicy, SchedulingPolicy
from cachefleet.runtime.models.types import ModelConfig, TensorSpec
from cachefleet.runtime.service.scheduler import ModelScheduler
from cachefleet.runtime.service.statistics import StatisticsRegistry
from cachefleet.runtime.tensor import Tensor
from cachefleet.runtime.tracing.current import CURRENT, TracedRequest
from cachefleet.runtime.tracing.propagation import context_from_metadata
from cachefleet.runtime.tracing.upstream_spans import upstream_call


class CallingModel:
    """A model whose run is an "upstream call": it opens the call's span and keeps the headers
    it would send. A run of the value in ``held`` waits until the test lets it go."""

    def __init__(self) -> None:
        self.config = ModelConfig(
            "calling", "onnxruntime_onnx", "onnxruntime", 8,
            (TensorSpec("X", "INT32", (1,)),), (TensorSpec("Y", "INT32", (1,)),),
        )  # fmt: skip
        self.labels: Mapping[str, Sequence[str]] = {}
        self.quick = False
        self.fingerprint = "cd" * 32
        self.name, self.version = "calling", "1"
        self.sent: list[tuple[tuple[str, str], ...] | None] = []
        self.held: dict[int, threading.Event] = {}
        self.fail = False
        self.started: list[int] = []

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        values = inputs[0].to_numpy()
        self.started.append(int(values[0, 0]))
        event = self.held.get(int(values[0, 0]))
        if event is not None:
            event.wait(30)
        with upstream_call("ModelInfer", lambda: {"cachefleet.model.name": "calling"}) as call:
            self.sent.append(None if call is None else call.headers)
            if self.fail:
                raise NotReadyError("upstream 127.0.0.1:1 did not answer within 3 s")
        return [Tensor.from_numpy("Y", values * 2)]


@pytest.fixture
def spans() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


@pytest.fixture
async def executor() -> AsyncIterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


def request(value: int) -> list[Tensor]:
    return [Tensor.from_numpy("X", np.array([[value]], dtype=np.int32))]


def traced_run(
    scheduler: ModelScheduler, tracer: trace.Tracer, value: int
) -> tuple[asyncio.Task[list[Tensor]], TracedRequest]:
    """``scheduler.run`` in a task of its own whose current request is traced, as a transport
    that traces runs it."""
    traced = TracedRequest(tracer.start_span(f"request {value}"), tracer)
    context = contextvars.copy_context()
    context.run(CURRENT.set, traced)
    task = asyncio.get_running_loop().create_task(scheduler.run(request(value)), context=context)
    return task, traced


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def client_spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind is trace.SpanKind.CLIENT]


async def test_a_call_is_a_child_span_whose_traceparent_goes_with_it(
    spans: tuple[trace.Tracer, InMemorySpanExporter], executor: ThreadPoolExecutor
) -> None:
    tracer, exporter = spans
    model = CallingModel()
    scheduler = ModelScheduler(
        model, SchedulingPolicy(), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    task, traced = traced_run(scheduler, tracer, 3)
    assert int((await task)[0].to_numpy()[0, 0]) == 6
    (call,) = client_spans(exporter)
    assert call.parent is not None
    assert call.parent.span_id == traced.span.get_span_context().span_id
    assert call.context.trace_id == traced.span.get_span_context().trace_id
    (headers,) = model.sent
    assert headers is not None
    sent = trace.get_current_span(context_from_metadata(headers)).get_span_context()
    assert (sent.trace_id, sent.span_id) == (call.context.trace_id, call.context.span_id)
    assert call.attributes is not None
    assert call.attributes["cachefleet.model.name"] == "calling"

    # A request nobody traces (tracing off, or the repository's refresh): no span, no header.
    await scheduler.run(request(4))
    assert model.sent[-1] is None
    assert len(client_spans(exporter)) == 1
    await scheduler.close()


async def test_a_batch_is_one_call_under_the_oldest_request_linked_to_the_others(
    spans: tuple[trace.Tracer, InMemorySpanExporter], executor: ThreadPoolExecutor
) -> None:
    tracer, exporter = spans
    model = CallingModel()
    model.held[1] = threading.Event()
    policy = SchedulingPolicy(batching=BatchingPolicy(max_batch_size=8))
    metrics = RuntimeMetrics()
    scheduler = ModelScheduler(model, policy, executor, metrics, StatisticsRegistry())
    first, _ = traced_run(scheduler, tracer, 1)  # holds the one instance
    await until(lambda: model.started == [1], "the first execution running")
    later = [traced_run(scheduler, tracer, value) for value in (5, 6, 7)]

    def queued() -> bool:
        labels = {"model": "calling", "version": "1"}
        waiting = metrics.registry.get_sample_value("nv_inference_pending_request_count", labels)
        return waiting == 3

    await until(queued, "three requests queued behind the held one")
    model.held[1].set()
    await asyncio.gather(first, *(task for task, _ in later))
    alone, batch = sorted(client_spans(exporter), key=lambda s: s.start_time or 0)
    oldest, *others = (traced.span.get_span_context() for _, traced in later)
    assert batch.parent is not None
    assert batch.parent.span_id == oldest.span_id
    assert [link.context.span_id for link in batch.links] == [o.span_id for o in others]
    assert alone.links == ()
    await scheduler.close()


async def test_a_failed_call_ends_in_error_with_its_status(
    spans: tuple[trace.Tracer, InMemorySpanExporter], executor: ThreadPoolExecutor
) -> None:
    tracer, exporter = spans
    model = CallingModel()
    model.fail = True
    scheduler = ModelScheduler(
        model, SchedulingPolicy(), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    task, _ = traced_run(scheduler, tracer, 9)
    with pytest.raises(NotReadyError):
        await task
    (call,) = client_spans(exporter)
    assert call.status.status_code is trace.StatusCode.ERROR
    assert call.status.description == "upstream 127.0.0.1:1 did not answer within 3 s"
    assert call.attributes is not None
    assert call.attributes["error.type"] == "503"
    await scheduler.close()
