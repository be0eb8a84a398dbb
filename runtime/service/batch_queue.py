"""The dynamic batcher's queue: which waiting requests run together, and when.

Pure bookkeeping, no I/O and no clock of its own (the caller passes ``now``), so the rules can
be read in one place. They follow Triton's dynamic batcher:

- requests wait by priority level (1 is served first), first come first served within a level;
- a batch takes the request at the head and the requests after it that can share its execution
  (same inputs, datatypes and non-batch dims), up to ``max_batch_size`` rows;
- it goes at once when it reaches the largest ``preferred_batch_size`` (or ``max_batch_size``
  when none is preferred) or when the next waiting request would not fit, otherwise when the
  head has waited ``max_queue_delay``; with several
  preferred sizes, the largest preferred size that the waiting requests fill exactly wins;
- a request whose caller has gone (its future is done: cancelled) is dropped, never run;
- a level's queue holds at most its policy's ``max_queue_size`` requests (the scheduler refuses
  more), and a request whose queue timeout passed with ``timeout_action: DELAY`` waits behind
  every request still in time (with REJECT the scheduler answers it and it is dropped).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from cachefleet.runtime.models.scheduling import BatchingPolicy
from cachefleet.runtime.service.rows import Signature
from cachefleet.runtime.tensor import Tensor
from cachefleet.runtime.tracing.current import TracedRequest


@dataclass(eq=False, slots=True)
class Pending:
    """One request waiting for its rows to run."""

    inputs: Sequence[Tensor]
    rows: int
    signature: Signature
    future: asyncio.Future[list[Tensor]]
    #: The event loop's clock when it was queued.
    queued_at: float
    level: int = 0
    #: ``time.perf_counter_ns()`` when it arrived, for the statistics' queue time.
    submitted_ns: int = 0
    #: Its queue timeout passed under a DELAY policy: served after every request in time.
    delayed: bool = False
    #: Taken into a batch: out of the queue, its timeout no longer applies.
    taken: bool = False
    #: Its request's span, when it is traced (the batch's upstream call is a child of it).
    traced: TracedRequest | None = None


@dataclass
class BatchQueue:
    """Waiting requests of one model version, by priority level."""

    policy: BatchingPolicy
    _levels: dict[int, deque[Pending]] = field(default_factory=dict)

    def __len__(self) -> int:
        return sum(len(level) for level in self._levels.values())

    def waiting_at(self, level: int) -> int:
        """Requests waiting at priority ``level`` whose caller still waits."""
        queue = self._levels.get(level)
        return 0 if queue is None else sum(not pending.future.done() for pending in queue)

    def push(self, pending: Pending) -> None:
        self._levels.setdefault(pending.level, deque()).append(pending)

    def drain(self) -> list[Pending]:
        """Every waiting request, removed from the queue."""
        waiting = self._in_order()
        self._levels.clear()
        return waiting

    def take(self, now: float) -> list[Pending] | float | None:
        """The batch to run now; else when to look again (the head's deadline); None if empty."""
        self._drop_abandoned()
        waiting = self._in_order()
        if not waiting:
            return None
        head = waiting[0]
        chosen, full = self._compatible(head, waiting)
        rows = sum(pending.rows for pending in chosen)
        deadline = head.queued_at + self.policy.max_queue_delay_s
        if not full and rows < self.policy.target_batch_size and now < deadline:
            return deadline
        batch = self._preferred_prefix(chosen)
        for pending in batch:
            self._levels[pending.level].remove(pending)
            pending.taken = True
        return batch

    def _in_order(self) -> list[Pending]:
        ordered = [pending for level in sorted(self._levels) for pending in self._levels[level]]
        if any(pending.delayed for pending in ordered):
            ordered.sort(key=lambda pending: pending.delayed)  # stable: order kept otherwise
        return ordered

    def _compatible(self, head: Pending, waiting: Sequence[Pending]) -> tuple[list[Pending], bool]:
        """The requests that can join the head's batch, and whether the next one would not fit
        (then waiting longer cannot make the batch bigger)."""
        chosen: list[Pending] = []
        rows = 0
        for pending in waiting:
            if pending.signature != head.signature:
                continue
            if rows + pending.rows > self.policy.max_batch_size:
                return chosen, True
            chosen.append(pending)
            rows += pending.rows
        return chosen, False

    def _preferred_prefix(self, chosen: list[Pending]) -> list[Pending]:
        """The longest head of ``chosen`` whose rows make a preferred size; all if none does."""
        preferred = set(self.policy.preferred_batch_sizes)
        if not preferred:
            return chosen
        best, rows = len(chosen), 0
        ends = []
        for index, pending in enumerate(chosen, start=1):
            rows += pending.rows
            if rows in preferred:
                ends.append(index)
        if ends:
            best = ends[-1]
        return chosen[:best]

    def _drop_abandoned(self) -> None:
        for level, queue in self._levels.items():
            if any(pending.future.done() for pending in queue):
                self._levels[level] = deque(p for p in queue if not p.future.done())
