"""`cachefleet serve` as a user starts it: settings errors, a config file, workers, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.processes import ServerProcess, free_port
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


def _one_line_error(result: subprocess.CompletedProcess[str], *names: str) -> str:
    """The one line a bad start prints, checked: exit 2, no traceback, the flag named."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("cachefleet serve: error: "), lines[0]
    for name in names:
        assert name in lines[0]
    return lines[0]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port another process's socket listens on."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_a_start_the_user_can_break_is_one_line_and_exit_2(
    model_repository: Path, tmp_path: Path, busy_port: int
) -> None:
    repository = str(model_repository)
    serve = ("--model-repository", repository, "--host", "127.0.0.1")
    free = ("--port", str(free_port()), "--grpc-port", str(free_port()))
    cases: list[tuple[tuple[str, ...], dict[str, str], tuple[str, ...]]] = [
        ((*serve, *free, "--cache", "tiered"), {}, ("--cache tiered", "--redis-url")),
        ((*serve, *free, "--cache", "redis"), {}, ("--redis-url",)),
        ((*serve, "--port", str(busy_port), "--grpc-port", "0"), {}, ("--port",)),
        ((*serve, "--port", str(free_port()), "--grpc-port", str(busy_port)), {},
         ("--grpc-port",)),
        ((*serve, "--port", "18999", "--grpc-port", "18999"), {}, ("--port", "--grpc-port")),
        (("--model-repository", f"{repository}/simple", *free), {},
         ("--model-repository", "--model-name")),
        ((*serve, *free, "--ssl-certfile", str(tmp_path / "missing.pem"), "--ssl-keyfile",
          str(tmp_path / "missing.pem")), {}, ("--ssl-certfile",)),
        ((*serve, *free, "--grpc-use-ssl", "--grpc-server-cert", str(tmp_path),
          "--grpc-server-key", str(tmp_path)), {}, ("--grpc-server-cert",)),
        ((*serve, *free), {"CACHEFLEET_GRPC_USE_SSL": "maybe"}, ("CACHEFLEET_GRPC_USE_SSL",)),
        ((*serve, *free), {"CACHEFLEET_CACHE": "tierd"}, ("CACHEFLEET_CACHE",)),
    ]  # fmt: skip
    for args, env, names in cases:
        result = _serve(*args, env={**os.environ, **env})
        assert "Traceback" not in result.stderr, args
        _one_line_error(result, *names)


def test_a_mistyped_serve_flag_shows_serves_usage_and_the_nearest_flag() -> None:
    result = _serve("--model-repositry", "/models")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: cachefleet serve ")
    last = result.stderr.strip().splitlines()[-1]
    assert last == (
        "cachefleet serve: error: unrecognized arguments: --model-repositry /models "
        "(did you mean --model-repository?)"
    )
    typo = _serve("--strict-readyness=false")
    assert "(did you mean --strict-readiness?)" in typo.stderr
    bad_value = _serve("--strict-readiness", "perhaps")
    assert bad_value.returncode == 2
    assert bad_value.stderr.startswith("usage: cachefleet serve ")
    assert "expected true or false, got 'perhaps'" in bad_value.stderr


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
