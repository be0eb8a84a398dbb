"""The connection caps fitted to the descriptors the process has (``descriptors``)."""

from __future__ import annotations

import logging
import resource

import pytest

from cachefleet.runtime.config import RuntimeSettings, SettingsError
from cachefleet.runtime.descriptors import RESERVED, fit_connection_caps, raise_soft_limit


def test_caps_that_fit_are_kept() -> None:
    settings = RuntimeSettings()
    assert fit_connection_caps(settings, limit=4096) is settings


def test_caps_over_the_limit_are_lowered_in_proportion_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings = RuntimeSettings.model_validate(
        {"limits": {"max_connections": 3000, "grpc_max_connections": 1000}}
    )
    with caplog.at_level(logging.WARNING):
        fitted = fit_connection_caps(settings, limit=1024)
    limits = fitted.limits
    assert limits.max_connections + limits.grpc_max_connections + RESERVED <= 1024
    assert limits.max_connections == 3 * limits.grpc_max_connections
    assert "open-file limit (nofile) 1024" in caplog.text
    assert "--grpc-max-connections 1000" in caplog.text


def test_grpc_off_leaves_its_cap_out_and_the_redis_pool_is_kept() -> None:
    settings = RuntimeSettings.model_validate(
        {"server": {"grpc_port": 0}, "redis": {"url": "redis://127.0.0.1:1", "pool_size": 100}}
    )
    fitted = fit_connection_caps(settings, limit=1024)
    assert fitted.limits.max_connections == 1024 - RESERVED - 100


def test_a_limit_without_room_for_connections_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="nofile"):
        fit_connection_caps(RuntimeSettings(), limit=RESERVED)


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, 256), hard))
        raised = raise_soft_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == raised
        assert raised == hard or hard == resource.RLIM_INFINITY
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
