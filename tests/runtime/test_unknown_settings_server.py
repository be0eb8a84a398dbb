"""A runtime pod whose ConfigMap was written by a newer operator starts, serves, and says what it
left out (0.1.0 exited with ``unknown setting`` and crash-looped instead)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from support.loopback import get
from support.processes import ServerProcess


def test_a_server_starts_on_a_config_with_settings_it_does_not_know(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "rollout: {pace: 2}\n"
        "cache: {mode: local, ttl_s: 60, restricted_apis: [cache]}\n"
        "limits: {max_inflight_bytes: 268435456}\n"
    )
    server = make_server("--config", str(config))
    assert get(f"{server.base_url}/v2/health/ready").status_code == 200
    assert get(f"{server.base_url}/v2/models/simple/ready").status_code == 200
    assert server.managed is not None
    log = server.managed.log_tail(100_000)
    assert "ignoring settings this release does not know" in log
    assert "'rollout', 'cache.restricted_apis'" in log
    assert log.count("ignoring settings") == 1
