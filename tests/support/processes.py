"""Real processes for the tests: ``redis-server`` and ``cachefleet serve`` on free loopback ports.

Redis is started by the same helper the benchmarks use (:class:`RedisServer`), so there is one
way to start one and wait for it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from cachefleet.bench.processes import RedisServer, free_port

__all__ = ["CACHEFLEET", "RedisProcess", "ServerProcess", "free_port", "openssl", "wait_until"]

#: Run the CLI as a module with -P: the repository root holds a folder named "operator" that must
#: never shadow the standard library's module when the working directory is the root.
CACHEFLEET = [sys.executable, "-P", "-m", "cachefleet.cli.main"]


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


class RedisProcess(RedisServer):
    """A real redis-server on loopback. ``kill``/``restart`` keep the same port."""

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def command(self, *args: str) -> Any:
        """One raw command (redis-py leaves ``execute_command`` untyped)."""
        return self.client().execute_command(*args)  # type: ignore[no-untyped-call]


@dataclass
class ServerProcess:
    """A real ``cachefleet serve`` process."""

    port: int
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def url(self) -> str:
        """host:port, as tritonclient wants it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.url}"

    def start(self, timeout_s: float = 90) -> None:
        command = [*CACHEFLEET, "serve", "--host", "127.0.0.1",
                   "--port", str(self.port), *self.args]  # fmt: skip
        assert self.log_path is not None
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env}
        )
        wait_until(self._ready, timeout_s, f"cachefleet serve on port {self.port}")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
        try:
            with urllib.request.urlopen(f"{self.base_url}/v2/health/ready", timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def restart(self) -> None:
        self.stop()
        self.start()


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)
