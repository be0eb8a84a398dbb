"""Which misses are worth one computation per fleet, and how long a lease and a wait may last.

Waiting for another replica's answer costs at least two Redis round trips and a pub/sub message
on top of that replica's compute time, and holds the request meanwhile: it pays for models whose
compute time is well above that, and is waste for a model that answers in a millisecond. The
rule here is the measured compute time of the model version in this process (a moving average
of its executions): at or above ``min_compute_s`` the fleet coalesces, and a lease (and so a
wait) lasts twice that time plus 50 ms, bounded by ``max_wait_s``. A model not measured yet (no
execution in this process, as after a start or a rollout, exactly when a burst of new keys is
likely) is coalesced with the longest window, ``max_wait_s``: if it proves cheap, its first
execution stops it. The admission figures (measured costs per model and tier) can replace this
rule behind the same interface, :class:`FleetPolicy`.
"""

from __future__ import annotations

from typing import Protocol

#: Weight of a new measurement in the moving average.
_ALPHA = 0.2
#: What a wait adds to the compute time it waits for: round trips, the message, scheduling.
_SLACK_S = 0.05


class FleetPolicy(Protocol):
    def window_s(self, model: str, version: str) -> float | None:
        """How long a lease and a wait for ``model`` last; None: compute without the fleet."""
        ...

    def record(self, model: str, version: str, compute_s: float) -> None:
        """One execution of ``model`` took ``compute_s``."""
        ...


class MeasuredCompute:
    """:class:`FleetPolicy` from the compute times measured in this process."""

    def __init__(self, *, min_compute_s: float, max_wait_s: float) -> None:
        self.min_compute_s = min_compute_s
        self.max_wait_s = max_wait_s
        self._average: dict[tuple[str, str], float] = {}

    def window_s(self, model: str, version: str) -> float | None:
        average = self._average.get((model, version))
        if average is None:
            return self.max_wait_s
        if average < self.min_compute_s:
            return None
        return min(self.max_wait_s, 2 * average + _SLACK_S)

    def record(self, model: str, version: str, compute_s: float) -> None:
        key = (model, version)
        average = self._average.get(key)
        self._average[key] = (
            compute_s if average is None else average + _ALPHA * (compute_s - average)
        )
