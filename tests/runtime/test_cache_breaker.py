"""The circuit breaker's state machine (the Redis fault tests exercise it for real)."""

from __future__ import annotations

import logging

import pytest

from cachefleet.runtime.cache.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[CircuitBreaker, Clock, list[BreakerState]]:
    clock, changes = Clock(), list[BreakerState]()
    breaker = CircuitBreaker("redis", 3, 1.0, on_change=changes.append, clock=clock)
    return breaker, clock, changes


def test_opens_after_consecutive_failures_only() -> None:
    breaker, _, _ = make()
    breaker.record_failure("x")
    breaker.record_failure("x")
    breaker.record_success()
    breaker.record_failure("x")
    breaker.record_failure("x")
    assert breaker.allow()
    breaker.record_failure("x")
    assert breaker.state is BreakerState.OPEN
    assert not breaker.allow()


def test_one_probe_after_reset_then_closes_on_success() -> None:
    breaker, clock, changes = make()
    for _ in range(3):
        breaker.record_failure("x")
    clock.now += 1.0
    assert breaker.allow()  # the probe
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN]
    assert not breaker.allow()  # nobody else while it is out
    breaker.record_success()
    assert breaker.allow()
    assert changes == [BreakerState.OPEN, BreakerState.HALF_OPEN, BreakerState.CLOSED]


def test_failed_probe_reopens_for_another_period() -> None:
    breaker, clock, _ = make()
    for _ in range(3):
        breaker.record_failure("x")
    clock.now += 1.0
    assert breaker.allow()
    breaker.record_failure("x")
    assert breaker.state is BreakerState.OPEN
    clock.now += 0.5
    assert not breaker.allow()
    clock.now += 0.5
    assert breaker.allow()


def test_a_lost_probe_does_not_wedge_it_half_open() -> None:
    breaker, clock, _ = make()
    for _ in range(3):
        breaker.record_failure("x")
    clock.now += 1.0
    assert breaker.allow()  # a probe that never reports back
    clock.now += 1.0
    assert breaker.allow()


def test_an_outage_logs_twice_however_long_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    breaker, clock, _ = make()
    with caplog.at_level(logging.INFO, logger="cachefleet.runtime.cache.breaker"):
        for _ in range(50):
            breaker.record_failure("down")
            clock.now += 1.0
            breaker.allow()
        breaker.record_success()
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
