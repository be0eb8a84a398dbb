"""The processes a benchmark starts (Redis, our server, the peer) and how they are stopped.

Every process runs in its own session, so a Ctrl-C reaches only the harness, which then stops
them in order: SIGINT (our server drains), SIGTERM, then SIGKILL, and then kills whatever is
left of the session's process group (a ``--workers N`` server's workers, whose supervisor would
otherwise respawn them). Callers register each process with an :class:`contextlib.ExitStack`,
so errors and interrupts clean up too; a process that never becomes ready is stopped the same
way before the error is raised; and one started from the main thread gets SIGTERM from the
kernel if its starter dies without cleaning up (killed by SIGKILL or a CI timeout).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from cachefleet.bench.errors import BenchError
from cachefleet.bench.pinning import pinned

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Our command line, as a module with -P: the repository root holds a folder named "operator"
#: that must never shadow the standard library's module when the working directory is the root.
CACHEFLEET = [sys.executable, "-P", "-m", "cachefleet.cli.main"]


#: How often a first start tries fresh ports, and how the server says a port was taken.
_PORT_ATTEMPTS = 3
#: (the preflight check, or uvicorn and grpcio when the port is taken after it).
_PORT_TAKEN = ("address already in use", "failed to bind")


def free_port() -> int:
    """A port free on loopback right now."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on loopback right now: all held open while they are picked,
    since a port closed before the next pick may be handed out again at once."""
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket())
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _orphan_guard() -> list[str]:
    """A prefix that has the kernel send the process SIGTERM when its starter dies.

    The parent-death signal follows the thread that started the process, not the process: it is
    only set from the main thread (whose end is the process's), never from a worker thread that
    may end while the process is still wanted. ``setpriv`` (util-linux, beside ``taskset``) sets
    it and execs the command, so the process id stays the command's.
    """
    if threading.current_thread() is not threading.main_thread():
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


class ManagedProcess:
    """A child process leading a process group of its own, with a log file, stopped with its
    whole group by :meth:`stop` (idempotent)."""

    def __init__(self, name: str, command: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self.process = subprocess.Popen(
            [*_orphan_guard(), *command],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def log_tail(self, characters: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-characters:]
        except OSError:
            return ""

    def wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> None:
        """Poll ``predicate``; if the process dies or time runs out, stop it with its group and
        raise with the log's tail (a failed start leaves no process behind)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.stop()
                raise BenchError(
                    f"{self.name} exited with {self.process.returncode}:\n{self.log_tail()}"
                )
            if predicate():
                return
            time.sleep(0.1)
        self.stop()
        raise BenchError(f"{self.name} not ready after {timeout_s:g}s:\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGINT, SIGTERM, then SIGKILL to the process until it exits, then SIGKILL to what is
        left of its process group (its children, even if it died first and left them)."""
        for sig, wait_s in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if self.process.poll() is not None:
                break
            self.process.send_signal(sig)
            try:
                self.process.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            # A new session's id is its leader's pid; the group outlives the leader.
            os.killpg(self.process.pid, signal.SIGKILL)
        self._log.close()


def http_ok(url: str) -> Callable[[], bool]:
    """A readiness probe: ``GET url`` answers 200. Whatever else answers is not ready yet,
    garbage included: until the server binds, its free-picked port may be another process's
    (a gRPC or Redis server answers bytes that are no HTTP status line), and then the server
    exits with its port taken, which the caller sees and retries on fresh ports."""

    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, http.client.HTTPException, OSError):
            return False

    return probe


class RedisServer:
    """A throwaway ``redis-server`` on a loopback port, without persistence.

    The one way the bench, the chaos run, the cache micro-benchmark and the tests start Redis.
    ``kill`` (SIGKILL, as a crashed pod dies) and ``start`` again keep the same port, so clients
    reconnect to the same URL.
    """

    def __init__(
        self,
        workdir: Path,
        *args: str,
        password: str | None = None,
        cpus: str | None = None,
        config: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.args = list(args)
        self.password = password
        self.cpus = cpus
        #: A redis.conf to start from; the command line's port, bind and dir override its own.
        self.config = config
        self.process: ManagedProcess | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 15) -> None:
        binary = shutil.which("redis-server") or "redis-server"
        command = [binary, *([str(self.config)] if self.config else [])]
        command += ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir)]
        if self.config is None:
            command += ["--save", "", "--appendonly", "no"]
        command += self.args
        if self.password:
            command += ["--requirepass", self.password]
        self.process = ManagedProcess(
            "redis-server",
            pinned(command, self.cpus),
            self.workdir / f"redis-{self.port}.log",
            dict(os.environ),
        )
        self.process.wait_until(self.answers, timeout_s)

    def answers(self) -> bool:
        """Whether it answers PING (after AUTH when it has a password)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.3) as sock:
                if self.password:
                    sock.sendall(f"AUTH {self.password}\r\n".encode())
                    sock.recv(64)
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL, as a crashed or evicted pod would die."""
        if self.process is not None and self.process.process.poll() is None:
            self.process.process.kill()
            self.process.process.wait(10)
        self.stop()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def start_redis(workdir: Path, cpus: str | None) -> RedisServer | None:
    """A started :class:`RedisServer`, or None when ``redis-server`` is not installed."""
    if shutil.which("redis-server") is None:
        return None
    redis = RedisServer(workdir, "--protected-mode", "yes", cpus=cpus)
    redis.start()
    return redis


class ServerProcess:
    """``cachefleet serve`` on a free loopback port, logging to ``logdir``.

    The one way the harness, the chaos run and the tests start our server. ``start`` returns once
    ``/v2/health/ready`` answers 200 (or raises with the log's tail); ``stop`` and ``start``
    again keep the port.
    """

    def __init__(
        self,
        args: Sequence[str],
        logdir: Path,
        *,
        env: Mapping[str, str] | None = None,
        cpus: str | None = None,
        name: str = "cachefleet serve",
        wrapper: Sequence[str] = (),
    ) -> None:
        """``wrapper``: a command that runs the server, put before it (``prlimit ... --``)."""
        #: The gRPC port is never gRPC's default 8001: servers of parallel runs would fight over it.
        self.port, self.grpc_port = free_ports(2)
        self.args = list(args)
        self.env = dict(env or {})
        self.cpus = cpus
        self.name = name
        self.wrapper = list(wrapper)
        self.log_path = logdir / f"server-{self.port}.log"
        self.managed: ManagedProcess | None = None
        #: Whether a start succeeded once: from then on the ports are kept.
        self.managed_before = False

    @property
    def url(self) -> str:
        """host:port, as tritonclient wants it."""
        return f"127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.url}"

    @property
    def grpc_url(self) -> str:
        """host:port of the gRPC endpoint, as tritonclient.grpc wants it."""
        return f"127.0.0.1:{self.grpc_port}"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        return self.managed.process if self.managed is not None else None

    @property
    def pid(self) -> int:
        assert self.managed is not None, "not started"
        return self.managed.pid

    def start(self, timeout_s: float = 180) -> None:
        """Start and wait until ready. A first start whose ports were taken between
        :func:`free_port` and the server's bind (by any other process on the host) picks
        fresh ports and tries again; a restart keeps its ports, as clients hold them."""
        for attempt in range(_PORT_ATTEMPTS):
            try:
                self._start_once(timeout_s)
                break
            except BenchError as error:
                taken = any(sign in str(error).lower() for sign in _PORT_TAKEN)
                if not taken or self.managed_before or attempt == _PORT_ATTEMPTS - 1:
                    raise
                self.port, self.grpc_port = free_ports(2)
        self.managed_before = True

    def _start_once(self, timeout_s: float) -> None:
        command = [*CACHEFLEET, "serve", "--host", "127.0.0.1", "--port", str(self.port),
                   "--grpc-port", str(self.grpc_port)]  # fmt: skip
        self.managed = ManagedProcess(
            self.name,
            pinned([*self.wrapper, *command, *self.args], self.cpus),
            self.log_path,
            {**os.environ, **self.env},
        )
        self.managed.wait_until(http_ok(f"{self.base_url}/v2/health/ready"), timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.managed is not None:
            self.managed.stop()


def start_server(
    repository: Path,
    cache: str,
    redis_url: str | None,
    logdir: Path,
    cpus: str | None,
    extra_args: list[str] | None = None,
) -> ServerProcess:
    """A started :class:`ServerProcess` on ``repository`` with ``--cache cache``."""
    args = ["--model-repository", str(repository), "--cache", cache, "--log-level", "warning"]
    if redis_url and cache in ("redis", "tiered"):
        args += ["--redis-url", redis_url]
    server = ServerProcess([*args, *(extra_args or [])], logdir, cpus=cpus,
                           name=f"cachefleet serve --cache {cache}")  # fmt: skip
    server.start()
    return server


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its live descendants, from ``/proc``."""
    total = 0.0
    for process_id in _tree(pid):
        try:
            fields = Path(f"/proc/{process_id}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        # After the ")" closing the command name: state is field 0, utime 11, stime 12.
        total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    return total


def _tree(pid: int) -> list[int]:
    """``pid`` and its descendants (a taskset wrapper execs, so the pid is the server's)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    tree, pending = [], [pid]
    while pending:
        current = pending.pop()
        tree.append(current)
        pending.extend(children.get(current, []))
    return tree
