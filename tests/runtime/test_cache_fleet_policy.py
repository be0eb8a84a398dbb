"""Which models the fleet coalesces, and for how long: from the compute time admission measures."""

from __future__ import annotations

import pytest

from cachefleet.runtime.cache.admission import AdmissionPolicy
from cachefleet.runtime.cache.fleet_policy import AdmittedCompute


def policy() -> tuple[AdmittedCompute, AdmissionPolicy]:
    admission = AdmissionPolicy("always", ("redis",))
    return AdmittedCompute(admission, min_compute_s=0.005, max_wait_s=2.0), admission


def test_a_model_not_measured_yet_gets_the_longest_window() -> None:
    fleet, _ = policy()
    assert fleet.window_s("densenet_onnx", "1") == 2.0


def test_a_cheap_model_is_not_coalesced_once_measured() -> None:
    fleet, admission = policy()
    admission.of("simple", "1").computed(0.0004)
    assert fleet.window_s("simple", "1") is None
    assert fleet.window_s("simple", "2") == 2.0  # each version on its own


def test_the_window_follows_the_compute_time_within_the_bound() -> None:
    fleet, admission = policy()
    admission.of("densenet_onnx", "1").computed(0.2)
    assert fleet.window_s("densenet_onnx", "1") == pytest.approx(0.45)
    for _ in range(50):
        admission.of("densenet_onnx", "1").computed(5.0)  # a loaded replica: slower and slower
    assert fleet.window_s("densenet_onnx", "1") == 2.0
