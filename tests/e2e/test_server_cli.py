"""`cachefleet serve` as a user starts it: settings errors, a config file, workers, SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from support.processes import ServerProcess
from support.sample_requests import x_cache

from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.http.environment import export_settings, settings_from_environment


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-P", "-m", "cachefleet.cli.main", "serve", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "--model-repository is required"),
        (("--model-repository", "/nonexistent/repo"), "is not a folder"),
        (("--model-repository", ".", "--cache-ttl", "soon"), "--cache-ttl / CACHEFLEET_CACHE_TTL"),
    ],
)
def test_settings_errors_exit_2_with_a_clear_message(args: tuple[str, ...], message: str) -> None:
    result = _serve(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_config_file_and_workers(
    make_server: Callable[..., ServerProcess], model_repository: Path, tmp_path: Path
) -> None:
    config = tmp_path / "serve.yaml"
    config.write_text(f"model-repository: {model_repository}\nworkers: 2\ncache: local\n")
    server = make_server("--config", str(config))
    for _ in range(4):
        with urllib.request.urlopen(f"{server.base_url}/v2/models/simple") as response:
            assert json.loads(response.read())["name"] == "simple"
    # Each worker has its own local tier: the same request, sent on fresh connections, misses
    # once in each worker that answers it, and never more often than there are workers.
    misses, sent = 0, 0
    while misses < 2:
        sent += 1
        assert sent <= 400, "only one worker ever answered"
        if x_cache(server, "simple", 5) == "miss":
            misses += 1
    assert all(x_cache(server, "simple", 5) == "hit-local" for _ in range(20))
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(30) == 0


def test_workers_get_the_settings_and_the_password_through_the_environment() -> None:
    mac_key = "a cache secret of enough length"
    settings = RuntimeSettings.model_validate(
        {"models": {"repository": "/models"},
         "cache": {"mode": "redis", "ttl_s": "30m", "namespace": "ml/svc", "secret": mac_key},
         "redis": {"url": "redis://cache:6379/0", "password": "s3cret"}}
    )  # fmt: skip
    environ: dict[str, str] = {}
    export_settings(settings, environ)
    assert "s3cret" not in environ["CACHEFLEET_SETTINGS_JSON"]
    assert mac_key not in environ["CACHEFLEET_SETTINGS_JSON"]
    assert environ["CACHEFLEET_REDIS_PASSWORD"] == "s3cret"
    assert environ["CACHEFLEET_CACHE_SECRET"] == mac_key
    restored = settings_from_environment(environ)
    assert restored == settings
    assert restored.redis.password is not None
    assert restored.redis.password.get_secret_value() == "s3cret"
    assert restored.cache.secret is not None
    assert restored.cache.secret.get_secret_value() == mac_key
    assert restored.cache.namespace == "ml/svc"
