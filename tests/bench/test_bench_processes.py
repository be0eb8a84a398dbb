"""A process the tests and the harness start leaves nothing running behind it: its whole process
group goes when it fails to start, and when whoever started it is killed. A ``--workers 2``
server is the case that matters: its uvicorn supervisor respawns workers for as long as it lives.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from support.processes import ManagedProcess, ServerProcess
from support.waiting import wait_for

from cachefleet.bench.errors import BenchError
from cachefleet.bench.processes import http_ok

#: A ``--workers 2`` server on ``simple`` alone: its uvicorn supervisor and two worker processes.
WORKERS = ["--model-control-mode", "explicit", "--load-model", "simple", "--workers", "2"]


def processes(field: int, value: int) -> list[int]:
    """The live (not zombie) processes whose ``/proc/<pid>/stat`` field ``field`` (counted after
    the command name: 1 is the parent, 2 the process group) is ``value``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[field]) == value:
            found.append(int(entry.name))
    return found


def group_members(pgid: int) -> list[int]:
    return processes(2, pgid)


def children(pid: int) -> list[int]:
    return processes(1, pid)


def kill_group(pgid: int) -> None:
    """Teardown, whatever the outcome: a failing test must not leave its servers running."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)


def test_a_process_that_never_becomes_ready_is_stopped_with_its_children(tmp_path: Path) -> None:
    command = ["sh", "-c", "sleep 600 & exec sleep 600"]
    process = ManagedProcess("never ready", command, tmp_path / "never.log", dict(os.environ))
    try:
        wait_for(lambda: len(group_members(process.pid)) >= 2, "the child to start")
        with pytest.raises(BenchError, match="not ready after"):
            process.wait_until(lambda: False, timeout_s=0.2)
        wait_for(lambda: not group_members(process.pid), "the group to be gone")
    finally:
        kill_group(process.pid)


def test_a_server_whose_supervisor_dies_while_starting_leaves_no_worker(
    model_repository: Path, tmp_path: Path
) -> None:
    server = ServerProcess(["--model-repository", str(model_repository), *WORKERS], tmp_path)
    failures: list[BaseException] = []

    def start() -> None:
        try:
            server.start(timeout_s=180)
        except BaseException as error:  # the main thread asserts on it
            failures.append(error)

    starter = threading.Thread(target=start)
    starter.start()
    try:
        wait_for(lambda: server.managed, "the server to be started")
        wait_for(lambda: len(children(server.pid)) >= 2, "both workers", timeout_s=120)
        os.kill(server.pid, signal.SIGKILL)  # as a crash or the OOM killer would
        starter.join(60)
        assert not starter.is_alive()
        [failure] = failures
        assert isinstance(failure, BenchError), failure
        assert "exited with -9" in str(failure)
        wait_for(lambda: not group_members(server.pid), "the workers to be gone")
    finally:
        kill_group(server.pid)
        starter.join(60)


#: A test run in miniature: it starts a server from its main thread, says the server's process
#: id once the supervisor has started both workers (ready or not), and is killed while waiting.
STARTER = """
import sys, threading, time
from pathlib import Path
from cachefleet.bench.processes import ServerProcess
server = ServerProcess(sys.argv[2:], Path(sys.argv[1]))

def workers():
    stats = []
    for entry in Path("/proc").iterdir():
        try:
            stats.append((entry / "stat").read_text().rpartition(")")[2].split())
        except OSError:
            pass
    return [fields for fields in stats if fields[1] == str(server.pid)]

def report():
    while server.managed is None or len(workers()) < 2:
        time.sleep(0.05)
    print(server.pid, flush=True)

threading.Thread(target=report, daemon=True).start()
server.start()
time.sleep(600)
"""


def test_a_killed_test_run_leaves_no_server_process(model_repository: Path, tmp_path: Path) -> None:
    args = ["--model-repository", str(model_repository), *WORKERS]
    starter = subprocess.Popen(
        [sys.executable, "-P", "-c", STARTER, str(tmp_path), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    line = starter.stdout.readline()
    assert line.strip().isdigit(), f"the starter failed: {starter.wait(60)}"
    pid = int(line)
    try:
        assert len(children(pid)) >= 2  # the supervisor's two workers
        starter.kill()  # SIGKILL: no finalizer, no atexit, nothing of the starter runs
        starter.wait(30)
        wait_for(lambda: not group_members(pid), "the server's processes to be gone", 60)
    finally:
        kill_group(pid)
        starter.kill()
        starter.wait(30)


def test_a_port_answering_no_http_is_not_ready_and_not_an_error() -> None:
    """Until a server binds, its port may be another process's: a gRPC or Redis server answers
    bytes with no HTTP status line. The readiness probe reads that as not ready (the server then
    exits with its port taken, and its start retries on fresh ports), never as a failed test."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer_garbage() -> None:
        with listener:
            connection, _ = listener.accept()
            with connection:
                connection.recv(1024)
                connection.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\x00\x04\x00@\x00\x00\r\n")

    thread = threading.Thread(target=answer_garbage, daemon=True)
    thread.start()
    assert http_ok(f"http://127.0.0.1:{port}/v2/health/ready")() is False
    thread.join(timeout=30)
