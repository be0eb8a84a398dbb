"""The ledger relay is pulled, not pushed: a gRPC thread's record only queues (the event loop is
not woken for it), and the loop writes the queue down when a reader (or an unload) settles the
ledger, on its periodic drain, and a last time when the threaded server stops, which leaves no
timer or task behind."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVarTuple

import grpc
import numpy as np
from tritonclient.grpc import service_pb2, service_pb2_grpc

from cachefleet.bench.processes import free_port
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.grpc.ledger_relay import DRAIN_PERIOD_S, Answered, LedgerRelay
from cachefleet.runtime.grpc.server import start_grpc_server, stop_grpc_server
from cachefleet.runtime.grpc.threaded_server import ThreadedServer

HOUR_S = 3600.0
Ts = TypeVarTuple("Ts")


class WatchedLoop(asyncio.SelectorEventLoop):
    """An event loop that counts the callbacks other threads hand it and keeps every timer."""

    def __init__(self) -> None:
        super().__init__()
        self.handed: int = 0
        self.timers: list[asyncio.TimerHandle] = []

    def call_soon_threadsafe(
        self,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        self.handed += 1
        return super().call_soon_threadsafe(callback, *args, context=context)

    def call_at(
        self,
        when: float,
        callback: Callable[[*Ts], object],
        *args: *Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        timer = super().call_at(when, callback, *args, context=context)
        self.timers.append(timer)
        return timer

    def live_timers(self) -> list[asyncio.TimerHandle]:
        return [t for t in self.timers if not t.cancelled() and t.when() > self.time()]


def run(body: Callable[[WatchedLoop], Coroutine[Any, Any, None]]) -> None:
    with asyncio.Runner(loop_factory=WatchedLoop) as runner:
        loop = runner.get_loop()
        assert isinstance(loop, WatchedLoop)
        runner.run(body(loop))


def settings(repository: Path, grpc_port: int = 0) -> RuntimeSettings:
    return RuntimeSettings.model_validate(
        {"models": {"repository": str(repository), "load_models": ["simple"],
                    "control_mode": "explicit"},
         "cache": {"mode": "local", "admission": "always"},
         "server": {"host": "127.0.0.1", "grpc_port": grpc_port}}
    )  # fmt: skip


def written(runtime: Runtime) -> tuple[int, int]:
    """Successes and cache hits of ``simple`` 1 as written so far (read without settling)."""
    stats = runtime.ledger.statistics.for_version("simple", "1")
    return stats.success.count, stats.cache_hit.count


def record_from_a_thread(relay: LedgerRelay, runtime: Runtime, count: int) -> None:
    model = runtime.service.model("simple", None)

    def answer() -> None:
        for _ in range(count):
            started_ns = time.perf_counter_ns()
            relay.record(Answered(model, started_ns, started_ns + 1_000, started_ns + 2_000))

    thread = threading.Thread(target=answer)
    thread.start()
    thread.join()


async def until(condition: Callable[[], bool], deadline_s: float) -> float:
    """Let the loop run until ``condition`` holds; returns the seconds it took."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < deadline_s, "not reached before the deadline"
        await asyncio.sleep(0.005)
    return time.monotonic() - start


def test_a_record_wakes_nothing_and_a_reader_settles_it(model_repository: Path) -> None:
    async def body(loop: WatchedLoop) -> None:
        async with Runtime.open(settings(model_repository)) as runtime:
            relay = LedgerRelay(loop, runtime.ledger, runtime.service, period_s=HOUR_S)
            relay.start()
            handed = loop.handed
            record_from_a_thread(relay, runtime, 3)
            for _ in range(10):
                await asyncio.sleep(0)
            assert loop.handed == handed, "a record handed the loop a callback"
            assert written(runtime) == (0, 0), "written down without a reader"

            stats = runtime.service.statistics("simple")["model_stats"][0]["inference_stats"]
            assert (stats["success"]["count"], stats["cache_hit"]["count"]) == (3, 3)
            assert stats["cache_hit"]["ns"] == 3 * 1_000
            registry = runtime.metrics.registry
            success = registry.get_sample_value(
                "nv_inference_request_success", {"model": "simple", "version": "1"}
            )
            assert success == 3
            relay.stop()

    run(body)


def test_the_periodic_drain_writes_records_down_without_a_reader(model_repository: Path) -> None:
    async def body(loop: WatchedLoop) -> None:
        async with Runtime.open(settings(model_repository)) as runtime:
            relay = LedgerRelay(loop, runtime.ledger, runtime.service)
            relay.start()
            record_from_a_thread(relay, runtime, 2)
            await until(lambda: written(runtime) == (2, 2), deadline_s=40 * DRAIN_PERIOD_S)
            record_from_a_thread(relay, runtime, 1)
            await until(lambda: written(runtime) == (3, 3), deadline_s=40 * DRAIN_PERIOD_S)
            relay.stop()

    run(body)


def test_a_stopped_relay_drains_a_last_time_and_leaves_no_timer(model_repository: Path) -> None:
    async def body(loop: WatchedLoop) -> None:
        async with Runtime.open(settings(model_repository)) as runtime:
            relay = LedgerRelay(loop, runtime.ledger, runtime.service, period_s=HOUR_S)
            relay.start()
            assert loop.live_timers()
            record_from_a_thread(relay, runtime, 2)
            relay.stop()
            assert written(runtime) == (2, 2)
            assert loop.live_timers() == []
            record_from_a_thread(relay, runtime, 1)
            runtime.ledger.settle()
            assert written(runtime) == (2, 2), "still a source of the ledger once stopped"

    run(body)


def test_hits_before_an_unload_are_counted_not_dropped(model_repository: Path) -> None:
    async def body(loop: WatchedLoop) -> None:
        async with Runtime.open(settings(model_repository)) as runtime:
            relay = LedgerRelay(loop, runtime.ledger, runtime.service, period_s=HOUR_S)
            relay.start()
            record_from_a_thread(relay, runtime, 2)
            await runtime.control.unload("simple")
            success = runtime.metrics.registry.get_sample_value(
                "nv_inference_request_success", {"model": "simple", "version": "1"}
            )
            assert success == 2
            relay.stop()

    run(body)


def _request(value: int) -> Any:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.full(16, value, dtype=np.int32).tobytes())
    return request


def _infer_three_times(port: int) -> list[str]:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        statuses = []
        for _ in range(3):
            _, call = stub.ModelInfer.with_call(_request(4), timeout=30)
            statuses.append(dict(call.trailing_metadata())["x-cache"])
        return statuses


def test_stopping_the_threaded_server_writes_its_hits_down_and_leaves_nothing_running(
    model_repository: Path,
) -> None:
    async def body(loop: WatchedLoop) -> None:
        port = free_port()
        async with Runtime.open(settings(model_repository, port)) as runtime:
            timers_before, tasks_before = len(loop.timers), asyncio.all_tasks()
            server = await start_grpc_server(runtime)
            assert isinstance(server, ThreadedServer)
            try:
                statuses = await asyncio.to_thread(_infer_three_times, port)
            finally:
                await stop_grpc_server(server)
            assert statuses == ["miss", "hit-local", "hit-local"]
            assert written(runtime) == (3, 2)
            assert len(loop.timers) > timers_before, "the periodic drain was never armed"
            assert loop.live_timers() == []
            assert asyncio.all_tasks() == tasks_before

    run(body)
