"""The managed Redis's password never rides on a command line.

A process's arguments are anyone's to read on the node (``/proc/PID/cmdline``, ``ps``); Redis
overwrites its process title once it runs, but what it was started with was there to read. Here
the rendered container command is run for real (``sh -c``, the real ``redis-server``), with a
``redis-server`` first on PATH that writes down the arguments it was started with (what
``/proc/PID/cmdline`` shows at that moment) and then becomes the real one; and the password, one
with every character a config file or a shell could trip on, is the only one Redis accepts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from support.processes import free_port

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.redis import CONF_DIR, PASSWORD_ENV
from cachefleet.operator.manifests.spec import parse_spec

OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
#: Quotes, a space, backslashes, a '#', shell syntax and a newline: each must reach Redis as is.
PASSWORD = "p a\"s's\\w#o$(id)`rd`\\x41\nnext;line "
SPEC = {"model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}}


def redis_command() -> list[str]:
    spec = parse_spec(SPEC)
    children = build_children(spec, owner=OWNER, redis_password="unused", cache_secret="mac")
    [statefulset] = [c for c in children if c["kind"] == "StatefulSet"]
    [container] = statefulset["spec"]["template"]["spec"]["containers"]
    assert PASSWORD_ENV in {e["name"] for e in container["env"]}
    return list(container["command"])


@pytest.fixture
def started(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The rendered command running: (its port, the file of redis-server's arguments)."""
    real = shutil.which("redis-server")
    assert real is not None
    port = free_port()
    conf = tmp_path / "redis.conf"
    conf.write_text(f'port {port}\nbind 127.0.0.1\nsave ""\ndir {tmp_path}\n')
    argv = tmp_path / "argv"
    spy = tmp_path / "bin" / "redis-server"
    spy.parent.mkdir()
    spy.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {argv}\nexec {real} "$@"\n')
    spy.chmod(0o755)
    command = [part.replace(f"{CONF_DIR}/redis.conf", str(conf)) for part in redis_command()]
    env = {**os.environ, "PATH": f"{spy.parent}:{os.environ['PATH']}", PASSWORD_ENV: PASSWORD}
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE)
    try:
        yield port, argv
    finally:
        process.terminate()
        process.wait(timeout=30)


def answer(port: int, password: str | None) -> object:
    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=5)
    try:
        return client.ping()
    except redis.RedisError as error:
        return type(error).__name__
    finally:
        client.close()


def test_the_password_is_on_no_command_line_and_is_the_one_redis_takes(
    started: tuple[int, Path],
) -> None:
    port, argv = started
    deadline = time.monotonic() + 30
    while answer(port, PASSWORD) is not True:
        assert time.monotonic() < deadline, "redis-server did not take the password"
        time.sleep(0.1)
    arguments = argv.read_text()
    assert arguments.startswith(str(argv.parent / "redis.conf"))
    for piece in ("p a", "$(id)", "next;line", "requirepass"):
        assert piece not in arguments
    assert answer(port, None) == "AuthenticationError"
    assert answer(port, PASSWORD.rstrip()) == "AuthenticationError"  # every byte counts
