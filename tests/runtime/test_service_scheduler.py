"""The scheduler with a model whose executions the test holds and releases: instance counts
bound concurrent executions, preserve_ordering delivers answers in arrival order, and the
statistics extension counts executions per batch size. Executions are held on events, never
timed."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from cachefleet.runtime.cache.completion import RunsToCompletion
from cachefleet.runtime.errors import NotReadyError, OverloadedError
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.models.scheduling import BatchingPolicy, QueuePolicy, SchedulingPolicy
from cachefleet.runtime.models.types import ModelConfig, TensorSpec
from cachefleet.runtime.service.inline_scheduler import InlineScheduler
from cachefleet.runtime.service.scheduler import ModelScheduler
from cachefleet.runtime.service.schedulers import build_scheduler
from cachefleet.runtime.service.statistics import StatisticsRegistry
from cachefleet.runtime.tensor import Tensor


class HeldModel:
    """Doubles its input, but each execution waits until the test releases it."""

    def __init__(self) -> None:
        self.config = ModelConfig(
            "held", "onnxruntime_onnx", "onnxruntime", 8,
            (TensorSpec("X", "INT32", (1,)),), (TensorSpec("Y", "INT32", (1,)),),
        )  # fmt: skip
        self.labels: Mapping[str, Sequence[str]] = {}
        self.quick = False  # it waits for the test: never on the event loop
        self.fingerprint = "ab" * 32
        self.running = 0
        self.most_running = 0
        self.started: list[list[int]] = []
        self.release: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return "held"

    @property
    def version(self) -> str:
        return "1"

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        values = inputs[0].to_numpy()
        first = int(values[0, 0])
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.started.append([int(v) for v in values[:, 0]])
            event = self.release.setdefault(first, threading.Event())
        event.wait(30)
        with self._lock:
            self.running -= 1
        return [Tensor.from_numpy("Y", values * 2)]

    def let_go(self, first: int) -> None:
        with self._lock:
            self.release.setdefault(first, threading.Event()).set()


def batches(statistics: StatisticsRegistry) -> dict[int, int]:
    """Executions per batch size, from the statistics extension's document."""
    document = statistics.for_version("held", "1").document()
    return {
        batch["batch_size"]: batch["compute_infer"]["count"] for batch in document["batch_stats"]
    }


def request(value: int) -> list[Tensor]:
    return [Tensor.from_numpy("X", np.array([[value]], dtype=np.int32))]


async def until(condition: object, what: str) -> None:
    for _ in range(3000):
        if callable(condition) and condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
async def executor() -> AsyncIterator[ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(4)
    yield pool
    pool.shutdown(wait=False, cancel_futures=True)


async def test_instance_count_bounds_concurrent_executions(executor: ThreadPoolExecutor) -> None:
    model = HeldModel()
    scheduler = ModelScheduler(
        model, SchedulingPolicy(instances=2), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    calls = [asyncio.ensure_future(scheduler.run(request(value))) for value in (1, 2, 3)]
    await until(lambda: len(model.started) == 2, "two executions running")
    await asyncio.sleep(0)
    assert len(model.started) == 2, "the third waits for an instance"
    for value in (1, 2, 3):
        model.let_go(value)
    answers = await asyncio.gather(*calls)
    assert [int(a[0].to_numpy()[0, 0]) for a in answers] == [2, 4, 6]
    assert model.most_running == 2
    await scheduler.close()


async def test_preserve_ordering_answers_in_arrival_order(executor: ThreadPoolExecutor) -> None:
    model = HeldModel()
    policy = SchedulingPolicy(
        instances=2, batching=BatchingPolicy(max_batch_size=8, preserve_ordering=True)
    )
    statistics = StatisticsRegistry()
    scheduler = ModelScheduler(model, policy, executor, RuntimeMetrics(), statistics)
    first = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first batch running")
    second = asyncio.ensure_future(scheduler.run(request(2)))
    await until(lambda: len(model.started) == 2, "the second batch running beside it")
    model.let_go(2)
    await until(lambda: model.running == 1, "the second execution finished")
    await asyncio.sleep(0.05)
    assert not second.done(), "its answer waits for the earlier batch"
    model.let_go(1)
    assert [int(a[0].to_numpy()[0, 0]) for a in await asyncio.gather(first, second)] == [2, 4]
    assert batches(statistics) == {1: 2}
    await scheduler.close()


async def test_waiting_requests_merge_into_one_execution(executor: ThreadPoolExecutor) -> None:
    model = HeldModel()
    policy = SchedulingPolicy(batching=BatchingPolicy(max_batch_size=8))
    metrics, statistics = RuntimeMetrics(), StatisticsRegistry()
    scheduler = ModelScheduler(model, policy, executor, metrics, statistics)
    first = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first execution running")
    later = [asyncio.ensure_future(scheduler.run(request(v))) for v in (5, 6, 7)]
    await until(
        lambda: (
            metrics.registry.get_sample_value(
                "nv_inference_pending_request_count", {"model": "held", "version": "1"}
            )
            == 3
        ),
        "three requests queued behind the running one",
    )
    model.let_go(1)
    model.let_go(5)
    answers = await asyncio.gather(first, *later)
    assert [int(a[0].to_numpy()[0, 0]) for a in answers] == [2, 10, 12, 14]
    assert model.started == [[1], [5, 6, 7]]
    assert batches(statistics) == {1: 1, 3: 1}
    document = statistics.for_version("held", "1").document()
    assert (document["execution_count"], document["inference_count"]) == (2, 4)
    phases = document["inference_stats"]
    computed = [phases[p]["count"] for p in ("compute_input", "compute_infer", "compute_output")]
    assert computed == [4, 4, 4], "per request, as in Triton: the batch of three adds three"
    await scheduler.close()


async def test_closing_answers_waiting_requests_with_503(executor: ThreadPoolExecutor) -> None:
    model = HeldModel()
    policy = SchedulingPolicy(batching=BatchingPolicy(max_batch_size=8, max_queue_delay_s=3600))
    scheduler = ModelScheduler(model, policy, executor, RuntimeMetrics(), StatisticsRegistry())
    waiting = asyncio.ensure_future(scheduler.run(request(1)))
    await asyncio.sleep(0)
    await scheduler.close()
    with pytest.raises(NotReadyError):
        await waiting
    assert model.started == []


class QuickModel(HeldModel):
    """Doubles its input at once, noting the thread each run happens on."""

    def __init__(self) -> None:
        super().__init__()
        self.quick = True
        self.threads: list[int] = []

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        self.threads.append(threading.get_ident())
        return [Tensor.from_numpy("Y", inputs[0].to_numpy() * 2)]


async def no_run() -> list[Tensor]:
    """A compute that runs nothing: what a scheduler hands the cache is told by its type."""
    return []


async def test_a_quick_model_runs_on_the_event_loop_and_is_recorded(
    executor: ThreadPoolExecutor,
) -> None:
    model, statistics = QuickModel(), StatisticsRegistry()
    scheduler = build_scheduler(model, SchedulingPolicy(), executor, RuntimeMetrics(), statistics)
    assert isinstance(scheduler.compute(no_run), RunsToCompletion), "the cache is told so"
    waited: list[bool] = []
    answer = await scheduler.run(request(4), on_wait=lambda: waited.append(True))
    assert int(answer[0].to_numpy()[0, 0]) == 8
    assert model.threads == [threading.get_ident()], "run in the caller's thread, the loop's"
    assert not waited, "nothing to wait for, so no client watch is started"
    assert batches(statistics) == {1: 1}, "the execution is in the statistics like any other"
    await scheduler.close()


async def test_a_quick_model_with_dynamic_batching_still_batches(
    executor: ThreadPoolExecutor,
) -> None:
    model = QuickModel()
    policy = SchedulingPolicy(batching=BatchingPolicy(max_batch_size=8))
    scheduler = build_scheduler(model, policy, executor, RuntimeMetrics(), StatisticsRegistry())
    assert not isinstance(scheduler, InlineScheduler)
    assert scheduler.compute(no_run) is no_run, "the cache gets it as ordinary work"
    answer = await scheduler.run(request(3))
    assert int(answer[0].to_numpy()[0, 0]) == 6
    assert model.threads != [threading.get_ident()], "batches run in the executor"
    await scheduler.close()


def _queued(policy: QueuePolicy, max_batch_size: int = 8) -> SchedulingPolicy:
    return SchedulingPolicy(
        batching=BatchingPolicy(max_batch_size=max_batch_size, default_queue_policy=policy)
    )


async def test_a_full_queue_refuses_with_tritons_message(executor: ThreadPoolExecutor) -> None:
    model = HeldModel()
    policy = _queued(QueuePolicy(max_queue_size=2))
    scheduler = ModelScheduler(model, policy, executor, RuntimeMetrics(), StatisticsRegistry())
    running = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first execution running")
    queued = [asyncio.ensure_future(scheduler.run(request(v))) for v in (2, 3)]
    await asyncio.sleep(0.01)
    with pytest.raises(OverloadedError, match=r"^Exceeds maximum queue size$"):
        await scheduler.run(request(4))
    model.let_go(1)
    model.let_go(2)
    answers = await asyncio.gather(running, *queued)
    assert [int(a[0].to_numpy()[0, 0]) for a in answers] == [2, 4, 6]
    await scheduler.close()


@pytest.mark.parametrize(
    ("policy", "timeout_us"),
    [
        (QueuePolicy(default_timeout_s=0.05), 0),
        (QueuePolicy(default_timeout_s=3600, allow_timeout_override=True), 50_000),
    ],
    ids=["default-timeout", "request-timeout"],
)
async def test_a_request_past_its_queue_timeout_is_rejected(
    executor: ThreadPoolExecutor, policy: QueuePolicy, timeout_us: int
) -> None:
    model = HeldModel()
    scheduler = ModelScheduler(
        model, _queued(policy), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    running = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first execution running")
    with pytest.raises(NotReadyError, match=r"^Request timeout expired$"):
        await scheduler.run(request(2), timeout_us=timeout_us)
    model.let_go(1)
    assert int((await running)[0].to_numpy()[0, 0]) == 2
    assert model.started == [[1]], "the rejected request never ran"
    await scheduler.close()


async def test_a_request_timeout_needs_the_policy_to_allow_it(
    executor: ThreadPoolExecutor,
) -> None:
    model = HeldModel()
    scheduler = ModelScheduler(
        model, _queued(QueuePolicy()), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    running = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first execution running")
    waiting = asyncio.ensure_future(scheduler.run(request(2), timeout_us=1000))
    await asyncio.sleep(0.05)
    assert not waiting.done(), "allow_timeout_override is off: the timeout is ignored"
    model.let_go(1)
    model.let_go(2)
    await asyncio.gather(running, waiting)
    await scheduler.close()


async def test_a_delayed_request_waits_behind_those_in_time(
    executor: ThreadPoolExecutor,
) -> None:
    model = HeldModel()
    policy = QueuePolicy(default_timeout_s=0.03, delay_on_timeout=True)
    scheduler = ModelScheduler(
        model, _queued(policy, max_batch_size=1), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    running = asyncio.ensure_future(scheduler.run(request(1)))
    await until(lambda: len(model.started) == 1, "the first execution running")
    late = asyncio.ensure_future(scheduler.run(request(2)))
    await asyncio.sleep(0.1)  # its timeout passes: DELAY, not rejected
    assert not late.done()
    on_time = asyncio.ensure_future(scheduler.run(request(3)))
    await asyncio.sleep(0.01)
    for value in (1, 2, 3):
        model.let_go(value)
    await asyncio.gather(running, late, on_time)
    assert model.started == [[1], [3], [2]]
    await scheduler.close()


async def test_a_requests_terms_are_the_level_and_queue_timeout_it_is_queued_with(
    executor: ThreadPoolExecutor,
) -> None:
    """What the cache compares before identical requests share a computation: None for
    parameters that queue a request as if it named none, else its level and timeout."""
    overridable = QueuePolicy(default_timeout_s=2.0, allow_timeout_override=True)
    batching = BatchingPolicy(
        max_batch_size=8,
        priority_levels=3,
        default_priority_level=2,
        default_queue_policy=QueuePolicy(default_timeout_s=1.0),
        queue_policies={3: overridable},
    )
    scheduler = ModelScheduler(
        HeldModel(), SchedulingPolicy(batching=batching), executor, RuntimeMetrics(),
        StatisticsRegistry(),
    )  # fmt: skip
    assert scheduler.terms(0, 0) is None
    assert scheduler.terms(2, 0) is None, "the default level, named"
    assert scheduler.terms(0, 500) is None, "a timeout the level does not let it override"
    assert scheduler.terms(1, 0) == (1, 1.0)
    assert scheduler.terms(3, 0) == (3, 2.0)
    assert scheduler.terms(3, 500) == (3, 0.0005)
    unbatched = ModelScheduler(
        HeldModel(), SchedulingPolicy(), executor, RuntimeMetrics(), StatisticsRegistry()
    )
    assert unbatched.terms(0, 500) is None, "no queue: nothing its parameters could change"
    await scheduler.close()
    await unbatched.close()
