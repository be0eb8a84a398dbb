"""Which misses are worth one computation per fleet, and how long a lease and a wait may last.

Waiting for another replica's answer costs at least two Redis round trips and a pub/sub message
on top of that replica's compute time, and holds the request meanwhile: it pays for models whose
compute time is well above that, and is waste for a model that answers in a millisecond. The
compute time is the one admission measures per model version (``admission``: a moving average
of the model's computations on this replica, the same figure that decides whether a tier is
worth its cost): at or above ``min_compute_s`` the fleet coalesces, and a lease (and so a wait)
lasts twice that time plus 50 ms, bounded by ``max_wait_s``. A model not measured yet (no
computation on this replica, as after a start or a rollout, exactly when a burst of new keys is
likely) is coalesced with the longest window, ``max_wait_s``: if it proves cheap, its first
computation stops it. Whether Redis is used for the model at all is admission's decision
before this one: a request whose Redis tier admission skips never reaches the fleet.
"""

from __future__ import annotations

from typing import Protocol

from cachefleet.runtime.cache.admission import AdmissionPolicy

#: What a wait adds to the compute time it waits for: round trips, the message, scheduling.
_SLACK_S = 0.05


class FleetPolicy(Protocol):
    def window_s(self, model: str, version: str) -> float | None:
        """How long a lease and a wait for ``model`` last; None: compute without the fleet."""
        ...


class AdmittedCompute:
    """:class:`FleetPolicy` from the compute time admission measures."""

    def __init__(
        self, admission: AdmissionPolicy, *, min_compute_s: float, max_wait_s: float
    ) -> None:
        self.admission = admission
        self.min_compute_s = min_compute_s
        self.max_wait_s = max_wait_s

    def window_s(self, model: str, version: str) -> float | None:
        compute = self.admission.of(model, version).compute_s
        if compute.count == 0:
            return self.max_wait_s
        if compute.value < self.min_compute_s:
            return None
        return min(self.max_wait_s, 2 * compute.value + _SLACK_S)
