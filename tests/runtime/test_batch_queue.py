"""The dynamic batcher's rules, checked on the queue itself with an explicit clock."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from cachefleet.runtime.models.scheduling import BatchingPolicy
from cachefleet.runtime.service import rows
from cachefleet.runtime.service.batch_queue import BatchQueue, Pending
from cachefleet.runtime.tensor import Tensor


def pending(
    loop: asyncio.AbstractEventLoop, batch: int, *, at: float = 0.0, level: int = 0, width: int = 4
) -> Pending:
    tensor = Tensor.from_numpy("X", np.zeros((batch, width), dtype=np.float32))
    return Pending([tensor], batch, rows.signature([tensor]), loop.create_future(), at, level)


@pytest.fixture
def loop() -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop()


def sizes(taken: object) -> list[int]:
    assert isinstance(taken, list)
    return [item.rows for item in taken]


def test_waits_until_the_head_has_waited_the_delay(loop: asyncio.AbstractEventLoop) -> None:
    queue = BatchQueue(BatchingPolicy(max_batch_size=8, max_queue_delay_s=0.5))
    assert queue.take(0.0) is None
    queue.push(pending(loop, 1, at=1.0))
    queue.push(pending(loop, 2, at=1.2))
    assert queue.take(1.3) == 1.5, "not full, not late: come back at the head's deadline"
    assert sizes(queue.take(1.5)) == [1, 2]
    assert len(queue) == 0


def test_no_delay_runs_what_is_there(loop: asyncio.AbstractEventLoop) -> None:
    queue = BatchQueue(BatchingPolicy(max_batch_size=8))
    queue.push(pending(loop, 1))
    assert sizes(queue.take(0.0)) == [1]


def test_full_batch_goes_at_once_and_never_exceeds_the_maximum(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue = BatchQueue(BatchingPolicy(max_batch_size=8, max_queue_delay_s=10))
    for batch in (3, 4, 2, 1):
        queue.push(pending(loop, batch))
    assert sizes(queue.take(0.0)) == [3, 4], "3+4+2 would be 9 rows: 7 go without waiting"
    assert queue.take(0.0) == 10
    assert sizes(queue.take(10.0)) == [2, 1]


def test_preferred_size_goes_at_once_and_wins_at_the_deadline(
    loop: asyncio.AbstractEventLoop,
) -> None:
    queue = BatchQueue(
        BatchingPolicy(max_batch_size=8, preferred_batch_sizes=(2, 4), max_queue_delay_s=1)
    )
    for _ in range(3):
        queue.push(pending(loop, 1))
    assert queue.take(0.5) == 1, "3 rows: below the largest preferred size"
    assert sizes(queue.take(1.0)) == [1, 1], "at the deadline: the largest preferred size"
    for _ in range(4):
        queue.push(pending(loop, 1, at=2.0))
    assert sizes(queue.take(2.0)) == [1, 1, 1, 1], "the old one plus three: 4 rows"
    assert len(queue) == 1


def test_only_requests_that_agree_share_a_batch(loop: asyncio.AbstractEventLoop) -> None:
    queue = BatchQueue(BatchingPolicy(max_batch_size=8))
    queue.push(pending(loop, 1, width=4))
    queue.push(pending(loop, 1, width=5))
    queue.push(pending(loop, 2, width=4))
    assert sizes(queue.take(0.0)) == [1, 2]
    assert sizes(queue.take(0.0)) == [1]


def test_higher_priority_first_and_fifo_within_a_level(loop: asyncio.AbstractEventLoop) -> None:
    queue = BatchQueue(
        BatchingPolicy(max_batch_size=2, priority_levels=2, default_priority_level=2)
    )
    low = [pending(loop, 1, level=2) for _ in range(2)]
    high = pending(loop, 1, level=1)
    for item in (*low, high):
        queue.push(item)
    assert queue.take(0.0) == [high, low[0]]
    assert queue.take(0.0) == [low[1]]


def test_requests_whose_caller_went_are_dropped(loop: asyncio.AbstractEventLoop) -> None:
    queue = BatchQueue(BatchingPolicy(max_batch_size=8))
    gone, staying = pending(loop, 1), pending(loop, 1)
    queue.push(gone)
    queue.push(staying)
    gone.future.cancel()
    assert queue.take(0.0) == [staying]
    assert len(queue) == 0
