"""Unloading drains: requests already running finish, new ones are refused, then unload returns.

In-process, on the real sample repository, with no clock: the test holds a request "in flight"
itself and lets the event loop run until nothing else can happen.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from cachefleet.runtime.config import ModelSettings
from cachefleet.runtime.errors import BadRequestError, ModelNotFoundError
from cachefleet.runtime.models.repository import load_repository
from cachefleet.runtime.service import InFlight, ModelControl, StatisticsRegistry
from cachefleet.runtime.tensor import Tensor


@pytest.fixture
def loads() -> Iterator[ThreadPoolExecutor]:
    """Model control's executor, as the composition root builds it."""
    with ThreadPoolExecutor(max_workers=1) as executor:
        yield executor


async def settle() -> None:
    """Let every ready task run until it blocks."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_unload_waits_for_requests_in_flight(
    model_repository: Path, loads: ThreadPoolExecutor
) -> None:
    repository = load_repository(model_repository, ModelSettings(execution_provider="cpu"))
    in_flight = InFlight()
    control = ModelControl(repository, StatisticsRegistry(), in_flight, "explicit", loads)
    running = repository.get("simple")  # a request that resolved its model before the unload
    in_flight.enter("simple")

    unload = asyncio.create_task(control.unload("simple"))
    await settle()
    assert not unload.done(), "unload returned while a request was still running"
    with pytest.raises(ModelNotFoundError, match="not available: unloaded"):
        repository.get("simple")  # new requests are refused at once
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    (total, _) = running.run([Tensor.from_numpy("INPUT0", a), Tensor.from_numpy("INPUT1", a)])
    np.testing.assert_array_equal(total.to_numpy(), a * 2)  # the running one still computes

    in_flight.leave("simple")
    await asyncio.wait_for(unload, 10)
    assert in_flight.count("simple") == 0
    await control.load("simple")
    assert repository.get("simple").version == "1"


async def test_none_mode_and_file_parameters_are_refused(
    model_repository: Path, loads: ThreadPoolExecutor
) -> None:
    repository = load_repository(model_repository, ModelSettings(execution_provider="cpu"))
    control = ModelControl(repository, StatisticsRegistry(), InFlight(), "none", loads)
    with pytest.raises(BadRequestError, match="model control is off"):
        await control.unload("simple")
    with pytest.raises(BadRequestError, match="file: parameters"):
        await ModelControl(repository, StatisticsRegistry(), InFlight(), "explicit", loads).load(
            "simple", {"file:1/model.onnx": "AAAA"}
        )


async def test_a_load_runs_while_the_default_executor_is_taken(
    model_repository: Path, loads: ThreadPoolExecutor
) -> None:
    """Every thread of the loop's default executor is held (as idle gRPC streams once held
    it, each waiting for its next request): a load still runs, on model control's executor."""
    repository = load_repository(
        model_repository, ModelSettings(execution_provider="cpu"), frozenset({"simple"})
    )
    control = ModelControl(repository, StatisticsRegistry(), InFlight(), "explicit", loads)
    loop = asyncio.get_running_loop()
    release = threading.Event()
    with ThreadPoolExecutor(max_workers=2) as default:
        loop.set_default_executor(default)
        held = [loop.run_in_executor(None, release.wait) for _ in range(2)]
        try:
            await asyncio.wait_for(control.load("simple_int8"), 30)
        finally:
            release.set()
            await asyncio.gather(*held)
    assert repository.get("simple_int8").version == "1"
