"""The floors of serving gRPC from Python: grpcio servers that answer with canned bytes.

Each floor server answers every ``inference.GRPCInferenceService`` call perf_analyzer makes
with the bytes ``cachefleet serve`` answered the same call with (captured first, over a raw
channel), and does nothing else: no decoding, no cache, no encoding. What one measures is what
that way of serving gRPC costs by itself, the most a server built on it can reach. Measured back
to back under the same conditions, server pinned to one CPU and perf_analyzer to another:

- ``cachefleet``: ``cachefleet serve --cache local`` itself, ``simple``, every request a hit;
- ``aio``, ``aio-uvloop``: grpcio's asyncio server (with uvloop's loop);
- ``sync-4``, ``sync-8``: grpcio's synchronous server with 4 or 8 threads;
- ``sync-4-memo``: ``sync-4`` answering ``ModelInfer`` as the least a memo hit can: the call's
  ``cache-control`` metadata read (``grpc.infer.directives_of``), the message keyed and looked
  up in cachefleet's own memo (``cache.memo``) holding the canned answer, the entry's bytes sent
  with the ``x-cache`` trailer; no budget, ledger, model or local entry. Between ``sync-4`` and
  it is what the lookup itself costs; between it and ``cachefleet``, the rest of a hit.

Run ``bash scripts/harness grpc_floor`` (``--only aio,sync-4`` for some, ``--seconds``;
``--baseline OTHER/.venv/bin/python`` measures another checkout's server too, e.g. the previous
release's, as ``baseline``).
The figures on a shared machine move; compare ratios of one run. Beside each rate, the server's
CPU microseconds per request (its user and system time over the perf_analyzer run, at the run's
rate), which other load moves less. ``grpc_hit_work`` counts the Python work instead, which load
does not move at all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from cachefleet.bench import perf_analyzer
from cachefleet.bench.pinning import pinned
from cachefleet.bench.processes import CACHEFLEET, free_port, http_ok
from cachefleet.runtime.cache.api import CacheStatus, LocalEntryToken
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.memo import MemoEntry, ResponseMemo
from cachefleet.runtime.grpc.infer import SCOPE, directives_of
from cachefleet.runtime.grpc.messages import service_pb2

SERVICE = "inference.GRPCInferenceService"
#: The calls perf_analyzer makes, each with the request it is captured with.
CALLS: dict[str, Callable[[], Any]] = {
    "ServerLive": service_pb2.ServerLiveRequest,
    "ServerReady": service_pb2.ServerReadyRequest,
    "ModelReady": lambda: service_pb2.ModelReadyRequest(name="simple"),
    "ServerMetadata": service_pb2.ServerMetadataRequest,
    "ModelMetadata": lambda: service_pb2.ModelMetadataRequest(name="simple"),
    "ModelConfig": lambda: service_pb2.ModelConfigRequest(name="simple"),
    "ModelStatistics": lambda: service_pb2.ModelStatisticsRequest(name="simple"),
    "ModelInfer": lambda: _infer_request(),
}
FLOORS = ("cachefleet", "aio", "aio-uvloop", "sync-4", "sync-8", "sync-4-memo")


def _infer_request() -> Any:
    request = service_pb2.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(bytes(64))
    return request


def _identity(data: bytes) -> bytes:
    return data


def capture(address: str) -> dict[str, bytes]:
    """Each call's response bytes from the server at ``address``."""
    canned = {}
    with grpc.insecure_channel(address) as channel:
        for method, request in CALLS.items():
            call = channel.unary_unary(
                f"/{SERVICE}/{method}",
                request_serializer=_identity,
                response_deserializer=_identity,
            )
            canned[method] = call(request().SerializeToString(), timeout=10)
    return canned


def _unconfirmed(key: CacheKey, identity: object, started_ns: int) -> int | None:
    return None


def _memo_answer(body: bytes) -> Callable[[bytes, Any], bytes]:
    """``ModelInfer`` answered by a lookup in a memo, which keeps ``body`` as the answer to
    each request it has not seen (perf_analyzer repeats one)."""
    memo = ResponseMemo(64 << 20)
    # A token only the footprint reads: a lookup does not confirm it (no local entry here).
    token = LocalEntryToken(CacheKey("simple", "", bytes(32)), object(), _unconfirmed)
    trailer = (("x-cache", "hit-local"),)

    def answer(request: bytes, context: Any) -> bytes:
        if directives_of(context.invocation_metadata()).lookup:
            key = memo.key_of(SCOPE, request)
            found = memo.lookup(key)
            if found is None:
                memo.insert(key, MemoEntry(body, None, token, "simple", "", CacheStatus.HIT_LOCAL))
            context.set_trailing_metadata(trailer)
        return body

    return answer


def _handlers(
    canned: dict[str, bytes], asynchronous: bool, memo: bool = False
) -> grpc.GenericRpcHandler:
    def sync_answer(body: bytes) -> Callable[[bytes, Any], bytes]:
        return lambda request, context: body

    def async_answer(body: bytes) -> Callable[[bytes, Any], Any]:
        async def answer(request: bytes, context: Any) -> bytes:
            return body

        return answer

    make = async_answer if asynchronous else sync_answer
    handlers = {
        method: grpc.unary_unary_rpc_method_handler(
            _memo_answer(body) if memo and method == "ModelInfer" else make(body),
            request_deserializer=_identity,
            response_serializer=_identity,
        )
        for method, body in canned.items()
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


def serve(kind: str, port: int, canned_path: Path) -> None:
    """Serve the canned answers in ``canned_path`` on ``port`` the ``kind`` way, until killed."""
    canned = _read(canned_path)
    address = f"127.0.0.1:{port}"
    if kind.startswith("sync-"):
        pool = futures.ThreadPoolExecutor(max_workers=int(kind.split("-")[1]))
        server = grpc.server(pool)
        memo = kind.endswith("-memo")
        server.add_generic_rpc_handlers((_handlers(canned, asynchronous=False, memo=memo),))
        server.add_insecure_port(address)
        server.start()
        server.wait_for_termination()
        return

    async def main() -> None:
        aio = grpc.aio.server()
        aio.add_generic_rpc_handlers((_handlers(canned, asynchronous=True),))
        aio.add_insecure_port(address)
        await aio.start()
        await aio.wait_for_termination()

    if kind == "aio-uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


def _write(canned: dict[str, bytes], path: Path) -> None:
    with path.open("wb") as out:
        for method, body in canned.items():
            name = method.encode()
            out.write(len(name).to_bytes(4, "little") + name)
            out.write(len(body).to_bytes(4, "little") + body)


def _read(path: Path) -> dict[str, bytes]:
    data, canned, at = path.read_bytes(), {}, 0
    while at < len(data):
        parts = []
        for _ in range(2):
            size = int.from_bytes(data[at : at + 4], "little")
            parts.append(data[at + 4 : at + 4 + size])
            at += 4 + size
        canned[parts[0].decode()] = parts[1]
    return canned


def _cpu_s(pid: int) -> float:
    """The process's user and system CPU-seconds so far, every thread's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(address: str, seconds: float, pid: int) -> tuple[float, float]:
    """req/s, and the server's CPU microseconds per request: its CPU over the whole
    perf_analyzer run per request at the run's rate (less moved by other load than req/s)."""
    window_ms = max(500, round(seconds * 1000 / 3))
    arguments = perf_analyzer.command("simple", address, "grpc", 8, window_ms)
    cpu_before, started = _cpu_s(pid), time.monotonic()
    result = perf_analyzer.run_command(arguments, "1", timeout_s=seconds * 10 + 120)
    cpu_s, wall_s = _cpu_s(pid) - cpu_before, time.monotonic() - started
    rate = result.requests / result.duration_s if result.duration_s else 0.0
    return rate, (cpu_s / (rate * wall_s) * 1e6 if rate else 0.0)


def _started(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``command`` on CPU 0, in this session: with the kernel's autogroup scheduling a session
    is one scheduling group, and on a busy machine a server in a session of its own (as
    ``ServerProcess`` starts one) gets a very different share of its CPU. Every server here
    starts the same way, so their figures compare."""
    with log.open("ab") as out:
        return subprocess.Popen(pinned(command, "0"), stdout=out, stderr=subprocess.STDOUT)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    process.wait(timeout=30)


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 180
    while not ready():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("cachefleet serve did not start (see serve.log)")
        time.sleep(0.2)


def _wait_for(address: str, timeout_s: float = 30) -> None:
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout_s)


def _served(
    cachefleet: list[str], args: list[str], log: Path, seconds: float | None, canned: Path | None
) -> tuple[float, float] | None:
    """``cachefleet serve`` (``cachefleet``: the command that runs the CLI) measured for
    ``seconds`` (None: not measured), its answers written to ``canned`` when given."""
    http_port, grpc_port = free_port(), free_port()
    address = f"127.0.0.1:{grpc_port}"
    command = [*cachefleet, "serve", "--host", "127.0.0.1", "--port", str(http_port),
               "--grpc-port", str(grpc_port), *args]  # fmt: skip
    server = _started(command, log)
    try:
        _wait_until(http_ok(f"http://127.0.0.1:{http_port}/v2/health/ready"), server)
        figures = None if seconds is None else _measure(address, seconds, server.pid)
        if canned is not None:
            _write(capture(address), canned)
        return figures
    finally:
        _stop(server)


def run(
    only: list[str], seconds: float, serve_args: list[str], baseline: Path | None = None
) -> dict[str, tuple[float, float]]:
    """Each floor's req/s and CPU microseconds per request, in ``only``'s order
    (``cachefleet`` is always served first, measured only if asked: the canned answers come
    from it), and with
    ``baseline`` (the Python of another checkout's environment, e.g. the previous release's)
    that checkout's server as ``baseline``, measured the same way right after."""
    figures: dict[str, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="grpc-floor-") as folder:
        work = Path(folder)
        subprocess.run(
            [*CACHEFLEET, "samples", str(work / "models")],
            check=True,
            capture_output=True,
        )
        # Only `simple`: the others (densenet) would still be warming ONNX Runtime on the
        # server's CPU when it first answers ready.
        args = ["--model-repository", str(work / "models"), "--cache", "local",
                "--model-control-mode", "explicit", "--load-model", "simple",
                "--log-level", "warning", *serve_args]  # fmt: skip
        wanted = seconds if "cachefleet" in only else None  # the canned answers come anyway
        ours = _served(CACHEFLEET, args, work / "serve.log", wanted, work / "canned")
        if ours is not None:
            figures["cachefleet"] = ours
        if baseline is not None:
            other = [str(baseline), "-P", "-m", "cachefleet.cli.main"]
            theirs = _served(other, args, work / "baseline.log", seconds, None)
            assert theirs is not None  # measured: it was given seconds
            figures["baseline"] = theirs
        for kind in only:
            if kind == "cachefleet":
                continue
            port = free_port()
            command = [sys.executable, "-m", "harness.grpc_floor", "--serve", kind,
                       "--port", str(port), "--canned", str(work / "canned")]  # fmt: skip
            process = _started(command, work / f"{kind}.log")
            try:
                _wait_for(f"127.0.0.1:{port}")
                figures[kind] = _measure(f"127.0.0.1:{port}", seconds, process.pid)
            finally:
                _stop(process)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(FLOORS), help="comma-separated floors")
    parser.add_argument("--seconds", type=float, default=9.0, help="perf_analyzer's windows")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="an extra `cachefleet serve` argument (repeat)")  # fmt: skip
    parser.add_argument("--baseline", type=Path,
                        help="another checkout's venv Python: its server measured too")  # fmt: skip
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--canned", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.serve:
        serve(options.serve, options.port, options.canned)
        return
    started = time.monotonic()
    figures = run(options.only.split(","), options.seconds, options.serve_arg, options.baseline)
    base = figures.get("cachefleet")
    for kind, (rate, cpu_us) in figures.items():
        ratio = f"  {rate / base[0]:.2f}x cachefleet" if base and base[0] else ""
        print(f"{kind:12s} {rate:9.0f} req/s {cpu_us:7.1f} us CPU/req{ratio}")
    print(f"(load average {os.getloadavg()[0]:.1f})")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
