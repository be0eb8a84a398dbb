"""The runtime's side of Redis security, end to end: a real server reaches a real TLS-only
redis-server with a client certificate, and a Redis password never shows in the server's logs,
``/metrics``, error answers, or the flush command's messages."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis as redis_py
from support import loopback
from support.processes import CACHEFLEET, RedisProcess, ServerProcess, free_port
from support.waiting import wait_for

from harness.chaos.answers import (
    answer_is_right,
    decode_outputs,
    redis_key,
    request_body,
    served_fingerprint,
)

MakeServer = Callable[..., ServerProcess]
MakeRedis = Callable[..., RedisProcess]
PASSWORD = "pw-7f3a9c1e-do-not-log"
WRONG = "wrong-5be2d4-do-not-log"


pytestmark = pytest.mark.slow


def x_cache(server: ServerProcess, seed: int) -> str:
    body, headers = request_body(seed, binary=True)
    response = loopback.post(
        f"{server.base_url}/v2/models/simple/infer", content=body, headers=headers, timeout=30
    )
    assert response.status_code == 200, response.text
    outputs = decode_outputs(response.content, response.headers["Inference-Header-Content-Length"])
    assert answer_is_right(seed, outputs)
    return response.headers["X-Cache"]


def eventually_hit_redis(
    server: ServerProcess, seed: int, writer: ServerProcess | None = None
) -> None:
    """``writer`` (or ``server``) misses; once its write-behind has stored the answer,
    ``server``, without a local tier, finds it in Redis."""
    assert x_cache(writer or server, seed) == "miss"

    def hit_redis() -> bool:
        status = x_cache(server, seed)
        assert status in ("miss", "hit-redis")
        return status == "hit-redis"

    wait_for(hit_redis, "a hit-redis")


def test_tls_redis_with_client_certificate_end_to_end(
    make_redis: MakeRedis, make_server: MakeServer, certificates: Path
) -> None:
    tls_port = free_port()
    redis = make_redis("--tls-port", str(tls_port),
                       "--tls-cert-file", str(certificates / "node.crt"),
                       "--tls-key-file", str(certificates / "node.key"),
                       "--tls-ca-cert-file", str(certificates / "ca.crt"))  # fmt: skip
    server = make_server(
        "--cache", "redis", "--redis-url", f"rediss://127.0.0.1:{tls_port}/0",
        "--redis-tls-ca-file", str(certificates / "ca.crt"),
        "--redis-tls-cert-file", str(certificates / "node.crt"),
        "--redis-tls-key-file", str(certificates / "node.key"),
        "--redis-connect-timeout", "2", "--redis-socket-timeout", "1",
    )  # fmt: skip
    eventually_hit_redis(server, 1)
    # The entry went over TLS into this very Redis (read back on its plain port).
    assert (
        redis_py.Redis(port=redis.port).exists(redis_key(1, served_fingerprint(server.base_url)))
        == 1
    )


def test_the_redis_password_never_leaks(
    make_redis: MakeRedis, make_server: MakeServer, tmp_path: Path
) -> None:
    redis = make_redis(password=PASSWORD)
    plain = f"redis://127.0.0.1:{redis.port}/0"
    from_env = make_server("--cache", "tiered", "--redis-url", plain, "--log-level", "debug",
                           env={"CACHEFLEET_REDIS_PASSWORD": PASSWORD})  # fmt: skip
    in_url = make_server("--cache", "redis", "--redis-url", redis.url, "--log-level", "debug")
    wrong = make_server("--cache", "redis", "--redis-url", plain, "--log-level", "debug",
                        env={"CACHEFLEET_REDIS_PASSWORD": WRONG})  # fmt: skip
    servers = (from_env, in_url, wrong)
    eventually_hit_redis(in_url, 1, writer=from_env)
    eventually_hit_redis(in_url, 2)
    for seed in range(3):  # a wrong password is a miss, never a failure
        assert x_cache(wrong, 10 + seed) == "miss"

    seen: list[str] = []
    redis.kill()
    for server in servers:
        for seed in range(20, 26):  # connection errors, logged and counted
            assert x_cache(server, seed) in ("miss", "hit-local")
        flush = loopback.post(f"{server.base_url}/v2/models/simple/cache/flush", timeout=30)
        assert flush.status_code == 503
        seen.append(flush.text)
        seen.append(loopback.get(f"{server.base_url}/metrics", timeout=10).text)
        seen.append(loopback.get(f"{server.base_url}/v2/models/simple/config", timeout=10).text)
    flush_command = subprocess.run(
        [*CACHEFLEET, "flush", "--model", "simple", "--redis-url", redis.url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert flush_command.returncode != 0
    seen += [flush_command.stdout, flush_command.stderr]
    for server in servers:
        server.stop()
        seen.append(server.log())
    everything = "\n".join(seen)
    assert "password" in wrong.log()  # the refusals and outages were logged...
    assert "Connection refused" in everything
    assert PASSWORD not in everything  # ...and the secrets were not
    assert WRONG not in everything


def _worker_environments(pid: int) -> str:
    """The environment ``pid`` handed to the processes it started (its workers)."""
    texts = []
    for process in _children(pid):
        try:
            with open(f"/proc/{process}/environ", "rb") as environ:
                texts.append(environ.read().replace(b"\0", b"\n").decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(texts)


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_password_in_the_url_query_or_user_info_never_leaks(
    make_redis: MakeRedis, make_server: MakeServer
) -> None:
    redis = make_redis(password=PASSWORD)
    in_query = f"redis://127.0.0.1:{redis.port}/0?password={PASSWORD}"
    with_user = f"redis://default:{PASSWORD}@127.0.0.1:{redis.port}/0"
    query_server = make_server("--cache", "redis", "--redis-url", in_query, "--log-level",
                               "debug", "--workers", "2")  # fmt: skip
    user_server = make_server("--cache", "tiered", "--log-level", "debug", "--workers", "2",
                              env={"CACHEFLEET_REDIS_URL": with_user})  # fmt: skip
    servers = (query_server, user_server)
    eventually_hit_redis(query_server, 31, writer=user_server)  # both still authenticate
    # What the workers were handed: the password in its own variable, never in the URL or JSON.
    handed = _worker_environments(query_server.pid) + _worker_environments(user_server.pid)
    assert "CACHEFLEET_SETTINGS_JSON" in handed
    for line in handed.splitlines():
        if PASSWORD in line:
            assert line.startswith("CACHEFLEET_REDIS_PASSWORD="), line.split("=")[0]

    seen: list[str] = []
    redis.kill()
    for server in servers:
        for seed in range(40, 44):
            assert x_cache(server, seed) in ("miss", "hit-local")
        flush = loopback.post(f"{server.base_url}/v2/models/simple/cache/flush", timeout=30)
        assert flush.status_code == 503
        assert "redis://" in flush.text  # it says where, without the secret
        seen += [flush.text, loopback.get(f"{server.base_url}/metrics", timeout=10).text]
        seen.append(loopback.get(f"{server.base_url}/v2/models/simple/config", timeout=10).text)
    for url in (in_query, with_user):
        flush_command = subprocess.run(
            [*CACHEFLEET, "flush", "--model", "simple", "--redis-url", url],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert flush_command.returncode != 0
        seen += [flush_command.stdout, flush_command.stderr]
    bad_scheme = subprocess.run(
        [*CACHEFLEET, "flush", "--model", "simple", "--redis-url", f"http://u:{PASSWORD}@h/"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert bad_scheme.returncode == 2
    seen.append(bad_scheme.stderr)
    for server in servers:
        server.stop()
        seen.append(server.log())
    everything = "\n".join(seen)
    assert "Connection refused" in everything
    assert PASSWORD not in everything
