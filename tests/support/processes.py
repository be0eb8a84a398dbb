"""Real processes for the tests: ``redis-server`` and ``cachefleet serve`` on free loopback ports.

Both are started by the helpers ``cachefleet bench`` and ``cachefleet demo`` use
(``cachefleet.bench.processes``), so there is one way to start each and wait for it; test modules
take them from here, never from the package.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis

from cachefleet.bench import processes
from cachefleet.bench.processes import CACHEFLEET, ManagedProcess, free_port

__all__ = [
    "CACHEFLEET",
    "ManagedProcess",
    "RedisProcess",
    "ServerProcess",
    "free_port",
    "openssl",
    "upstream_front",
]


class ServerProcess(processes.ServerProcess):
    """``cachefleet serve`` on a free loopback port; ``restart`` keeps the port."""

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def upstream_front(
    upstream: str, logs: Path, *flags: str, auth: tuple[str, str] | None = None
) -> Iterator[ServerProcess]:
    """``cachefleet serve --upstream <upstream> <flags>`` started, and stopped after. ``auth``:
    the metadata key the upstream reads and its token, which the front reads from a file in
    ``logs`` holding it with a trailing newline, as from a mounted Secret."""
    args = ["--upstream", upstream]
    if auth is not None:
        header, token = auth
        (logs / "token").write_text(token + "\n")
        args += ["--upstream-auth-header", header, "--upstream-auth-file", str(logs / "token")]
    server = ServerProcess([*args, *flags], logs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


class RedisProcess(processes.RedisServer):
    """A real redis-server on loopback. ``kill``/``restart`` keep the same port."""

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def command(self, *args: str) -> Any:
        """One raw command (redis-py leaves ``execute_command`` untyped)."""
        return self.client().execute_command(*args)  # type: ignore[no-untyped-call]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def fetch_model(
    uri: str, into: Path, env: dict[str, str], *extra: str
) -> subprocess.CompletedProcess[str]:
    """``cachefleet fetch-model URI INTO --model-name simple [extra]``, as the init container
    runs it, with ``env`` as its whole environment; its output captured."""
    command = [*CACHEFLEET, "fetch-model", uri, str(into), "--model-name", "simple", *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
