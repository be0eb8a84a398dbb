"""Which models the fleet coalesces, and for how long: from the compute times measured."""

from __future__ import annotations

import pytest

from cachefleet.runtime.cache.fleet_policy import MeasuredCompute


def test_a_model_not_measured_yet_gets_the_longest_window() -> None:
    policy = MeasuredCompute(min_compute_s=0.005, max_wait_s=2.0)
    assert policy.window_s("densenet_onnx", "1") == 2.0


def test_a_cheap_model_is_not_coalesced_once_measured() -> None:
    policy = MeasuredCompute(min_compute_s=0.005, max_wait_s=2.0)
    policy.record("simple", "1", 0.0004)
    assert policy.window_s("simple", "1") is None
    assert policy.window_s("simple", "2") == 2.0  # each version on its own


def test_the_window_follows_the_compute_time_within_the_bound() -> None:
    policy = MeasuredCompute(min_compute_s=0.005, max_wait_s=2.0)
    policy.record("densenet_onnx", "1", 0.2)
    assert policy.window_s("densenet_onnx", "1") == pytest.approx(0.45)
    for _ in range(50):
        policy.record("densenet_onnx", "1", 5.0)  # a loaded replica: slower and slower
    assert policy.window_s("densenet_onnx", "1") == 2.0


def test_one_slow_run_moves_the_average_only_partly() -> None:
    policy = MeasuredCompute(min_compute_s=0.005, max_wait_s=10.0)
    policy.record("m", "1", 0.1)
    policy.record("m", "1", 1.1)
    assert policy.window_s("m", "1") == pytest.approx(2 * 0.3 + 0.05)
