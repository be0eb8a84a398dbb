"""Real Redis topologies on loopback: a Redis Cluster (and the nodes that Sentinel set-ups reuse).

The tests, ``cachefleet bench`` and the chaos run start them the same way, from the Debian
``redis-server`` and ``redis-cli`` binaries, with short timeouts so that failure detection and
failover take a second or two instead of the production defaults' 15-30 s:

- :class:`ClusterProcesses`: ``redis-server --cluster-enabled yes`` per node, joined with
  ``redis-cli --cluster create`` (three primaries, optionally a replica each). Every port is below
  55535 with ``port + 10000`` free too, because the cluster bus listens there. The nodes run with
  ``cluster-require-full-coverage no``, so a dead shard leaves the others serving.

The tests' Sentinel set-up (``tests/support/redis_nodes.py``) is built from the same
:class:`RedisNode`.

Everything runs in a folder the caller owns; :meth:`stop` ends every process this module started
(by its own handle, never by name).
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Below this, ``port + 10000`` (the cluster bus) is still a valid port.
_CLUSTER_PORT_LIMIT = 55535
NODE_TIMEOUT_MS = 1000


class TopologyError(RuntimeError):
    """A topology did not come up; the message carries the tail of the failing node's log."""


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise TopologyError(f"{name} is not installed (Debian package redis-server / redis-tools)")
    return found


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_port() -> int:
    """A free loopback port below 55535 whose cluster bus port (``+10000``) is free as well."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(20000, _CLUSTER_PORT_LIMIT)
        if _bindable(port) and _bindable(port + 10000):
            return port
    raise TopologyError("no free port pair (port, port+10000) below 55535")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise TopologyError(f"timed out after {timeout_s:g} s waiting for {what}")


def command(port: int, *args: str, timeout_s: float = 2.0) -> Any:
    """One command to the server on ``port`` (redis-py, synchronous); raises on failure."""
    import redis

    client = redis.Redis(
        host="127.0.0.1", port=port, socket_timeout=timeout_s, decode_responses=True
    )
    try:
        return client.execute_command(*args)  # type: ignore[no-untyped-call]
    finally:
        client.close()


def info(port: int, section: str) -> dict[str, Any]:
    """``INFO section`` of the server on ``port``, parsed by redis-py."""
    reply = command(port, "INFO", section)
    return dict(reply) if isinstance(reply, dict) else {}


def answers(port: int) -> bool:
    try:
        return bool(command(port, "PING", timeout_s=0.3))
    except Exception:  # any failure means "not yet"
        return False


class RedisNode:
    """One ``redis-server`` on loopback; :meth:`kill` and :meth:`start` keep its port and files."""

    def __init__(
        self,
        port: int,
        workdir: Path,
        args: list[str],
        sentinel: bool = False,
        cpus: str | None = None,
    ) -> None:
        self.port = port
        self.workdir = workdir
        self.args = args
        self.sentinel = sentinel
        #: ``taskset -c`` CPUs (the bench pins Redis beside the load generator), or None.
        self.cpus = cpus
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"redis-{self.port}.log"

    def start(self) -> None:
        workdir = str(self.workdir)
        if self.sentinel:
            line = [_binary("redis-server"), *self.args, "--sentinel"]
        else:
            line = [_binary("redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", workdir,
                    *self.args]  # fmt: skip
        if self.cpus:
            line = ["taskset", "-c", self.cpus, *line]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                line, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_until(self._up, 15, f"redis-server on port {self.port}")
        except TopologyError as error:
            raise TopologyError(f"{error}:\n{self.log_tail()}") from None

    def _up(self) -> bool:
        if self.process is not None and self.process.poll() is not None:
            raise TopologyError(f"redis-server on port {self.port} exited:\n{self.log_tail()}")
        return answers(self.port)

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, as a crashed pod dies."""
        if self.alive:
            assert self.process is not None
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.process is not None
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


class ClusterProcesses:
    """A Redis Cluster of ``primaries`` primaries, each with ``replicas`` replicas."""

    def __init__(
        self, workdir: Path, primaries: int = 3, replicas: int = 0, cpus: str | None = None
    ) -> None:
        self.workdir = workdir
        self.primaries = primaries
        self.replicas = replicas
        self.cpus = cpus
        self.nodes: list[RedisNode] = []

    def start(self) -> None:
        count = self.primaries * (1 + self.replicas)
        for _ in range(count):
            port = cluster_port()
            while any(node.port == port for node in self.nodes):
                port = cluster_port()
            node = RedisNode(port, self.workdir, [
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--cluster-require-full-coverage", "no",
            ], cpus=self.cpus)  # fmt: skip
            self.nodes.append(node)
            node.start()
        create = [_binary("redis-cli"), "--cluster", "create",
                  *(f"127.0.0.1:{node.port}" for node in self.nodes),
                  "--cluster-replicas", str(self.replicas), "--cluster-yes"]  # fmt: skip
        done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise TopologyError(f"redis-cli --cluster create failed:\n{done.stdout[-2000:]}")
        wait_until(self._healthy, 30, "cluster_state:ok on every node")

    def _healthy(self) -> bool:
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                reply = command(node.port, "CLUSTER", "INFO")
            except Exception:
                return False
            state = reply.get("cluster_state") if isinstance(reply, dict) else None
            if state != "ok" and "cluster_state:ok" not in str(reply):
                return False
        return bool(self.primary_ports())

    @property
    def url(self) -> str:
        """The seed node's URL (the first node; any node would do)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def node(self, port: int) -> RedisNode:
        return next(node for node in self.nodes if node.port == port)

    def primary_ports(self) -> list[int]:
        """The ports of the live nodes that currently serve slots as primaries."""
        ports: set[int] = set()
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                slots = command(node.port, "CLUSTER", "SLOTS")
            except Exception:
                continue
            for entry in slots:
                port = int(entry[2][1])
                if self.node(port).alive:
                    ports.add(port)
            break
        return sorted(ports)

    def port_of(self, key: str) -> int:
        """The port of the primary that serves ``key`` now, as the cluster itself says."""
        for node in self.nodes:
            if not node.alive:
                continue
            try:
                slot = int(command(node.port, "CLUSTER", "KEYSLOT", key))
                ranges = command(node.port, "CLUSTER", "SLOTS")
            except Exception:  # any failure: ask the next node
                continue
            for entry in ranges:
                if int(entry[0]) <= slot <= int(entry[1]):
                    return int(entry[2][1])
        raise TopologyError(f"no live node knows where {key} lives")

    def replica_of(self, primary_port: int) -> int | None:
        """The port of a live replica of ``primary_port``, or None."""
        for node in self.nodes:
            if node.port == primary_port or not node.alive:
                continue
            try:
                replication = info(node.port, "replication")
            except Exception:
                continue
            if int(replication.get("master_port", 0)) == primary_port:
                return node.port
        return None

    def keys_per_node(self, pattern: str = "*") -> dict[int, int]:
        """How many keys matching ``pattern`` each live primary holds."""
        counts: dict[int, int] = {}
        for port in self.primary_ports():
            counts[port] = len(command(port, "KEYS", pattern, timeout_s=10))
        return counts

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
