"""Fixtures shared by every test: real processes on free loopback ports, never mocks.

- ``make_redis``/``redis_server``: a real ``redis-server`` without persistence, killed at teardown.
- ``model_repository``: the sample models, generated once per session by ``cachefleet samples``.
- ``make_server`` / ``server``: a real ``cachefleet serve`` process, stopped at teardown.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Shared operator fixtures, loaded as a plugin by the modules that use them (pytest_plugins) after
# those modules import its helpers: register it first so its asserts are still rewritten.
pytest.register_assert_rewrite("kmock_fixtures")
pytest.register_assert_rewrite("redis_topology_fixtures")

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
#: Run the CLI as a module with -P: the repository root holds a folder named "operator" that must
#: never shadow the standard library's module when the working directory is the root.
CACHEFLEET = [sys.executable, "-P", "-m", "cachefleet.cli.main"]


def free_port() -> int:
    """A port that is free on loopback right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TimeoutError(f"timed out after {timeout_s}s waiting for {what}")


@dataclass
class RedisProcess:
    """A real redis-server on loopback. ``kill``/``restart`` keep the same port."""

    port: int
    args: list[str]
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    password: str | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [
            REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.workdir), *self.args,
        ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        wait_until(self._answers, 10, f"redis-server on port {self.port}")

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                if self.password:
                    sock.sendall(f"AUTH {self.password}\r\n".encode())
                    sock.recv(64)
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL, as a crashed or evicted pod would die."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def restart(self) -> None:
        self.kill()
        self.start()

    def client(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def make_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RedisProcess]]:
    """Start redis-servers with extra arguments, e.g. ``make_redis("--maxmemory", "1mb")``."""
    started: list[RedisProcess] = []

    def make(*args: str, password: str | None = None) -> RedisProcess:
        redis = RedisProcess(
            free_port(), list(args), tmp_path_factory.mktemp("redis"), password=password
        )
        redis.start()
        started.append(redis)
        return redis

    yield make
    for redis in started:
        redis.stop()


@pytest.fixture
def redis_server(make_redis: Callable[..., RedisProcess]) -> RedisProcess:
    return make_redis()


@pytest.fixture(scope="session")
def model_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample model repository, written once per test session."""
    path = tmp_path_factory.mktemp("models") / "repo"
    subprocess.run([*CACHEFLEET, "samples", str(path)], check=True)
    return path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, and a certificate for 127.0.0.1 signed by it (Redis and its clients use it)."""
    folder = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=cachefleet-test-ca", cwd=folder)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
            "-subj", "/CN=127.0.0.1", cwd=folder)  # fmt: skip
    (folder / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "node.crt", "-days", "2", "-extfile", "ext",
            cwd=folder)  # fmt: skip
    return folder


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


@pytest.fixture
def make_server(model_repository: Path, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers on the sample repository: ``make_server("--cache", "redis", ...)``."""
    started: list[ServerProcess] = []

    def make(
        *args: str, env: dict[str, str] | None = None, repository: Path | None = None
    ) -> ServerProcess:
        repo = repository or model_repository
        server = ServerProcess(free_port(), ["--model-repository", str(repo), *args], env or {})
        server.log_path = tmp_path / f"server-{server.port}.log"
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def server(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with the default settings (local cache) on the sample repository."""
    return make_server()
