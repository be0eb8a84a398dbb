"""The Python work of a gRPC memo hit, counted rather than timed, beside grpcio's own per call.

On a shared machine req/s and even CPU-seconds per request move with the load (the same server
measured 0.65-1.07x its floor in one day). Python bytecodes executed do not: this counts them,
with the Python and C functions called, for

- ``hit``: ``Inference.ModelInfer`` answering a repeated ``simple`` request from the memo, called
  in process on a thread with a stand-in for grpcio's servicer context (what cachefleet adds to
  a call: the metadata scan, the key, the budget, the lookup, the ledger, the metrics);
- ``floor``: everything grpcio's stock 4-thread synchronous server runs in Python for one
  ``ModelInfer`` call answered with canned bytes (``grpc_floor``'s ``sync-4``), every server
  thread traced, the calls sent one at a time by a client in another process.

The hit's count over the floor's is the share of Python work a hit adds to the floor's; it says
nothing of gRPC core's C++ or the kernel, which both servers share. Run
``bash scripts/harness grpc_hit_work`` (``--calls`` to list the hit's calls).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from types import FrameType
from typing import Any

import grpc

from cachefleet.bench.processes import CACHEFLEET
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.grpc.infer import Inference
from cachefleet.runtime.grpc.loop_bridge import LoopBridge
from harness.grpc_floor import SERVICE, _handlers, _infer_request

#: Calls counted (after warming up).
CALLS = 200
_CLIENT = """
import sys, grpc
call = grpc.insecure_channel(sys.argv[1]).unary_unary(
    "/%s/ModelInfer", request_serializer=bytes, response_deserializer=bytes)
for _ in range(int(sys.argv[2])):
    call(bytes.fromhex(sys.argv[3]), timeout=10)
"""


class Tally:
    """Opcodes and calls seen by the tracing and profiling hooks, by function."""

    def __init__(self) -> None:
        self.opcodes = 0
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()

    def trace(self, frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        frame.f_trace_opcodes = True
        if event == "opcode":
            with self._lock:
                self.opcodes += 1
        return self.trace

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            self.calls[frame.f_code.co_qualname] += 1
        elif event == "c_call":
            self.calls["C " + getattr(arg, "__qualname__", repr(arg))] += 1


class StandIn:
    """What ``grpc.infer`` uses of grpcio's servicer context, with the metadata a Triton client
    sends."""

    def __init__(self) -> None:
        self.trailing: Any = None

    def invocation_metadata(self) -> Any:
        return (("user-agent", "grpc-c++/1.65"), ("te", "trailers"))

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing = metadata

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return True


def count_hit(models: Path) -> tuple[Tally, Tally]:
    """The opcodes of one memo hit (first), and its calls (second), each averaged later."""
    settings = RuntimeSettings.model_validate(
        {"models": {"repository": str(models), "load_models": ["simple"],
                    "control_mode": "explicit"},
         "cache": {"mode": "local", "admission": "always"}}
    )  # fmt: skip
    message = _infer_request().SerializeToString()

    async def main() -> tuple[Tally, Tally]:
        async with Runtime.open(settings) as runtime:
            inference = Inference(runtime, LoopBridge(asyncio.get_running_loop()))
            context: Any = StandIn()
            for _ in range(3):  # a miss, its memoized render, a hit
                await asyncio.to_thread(inference.ModelInfer, message, context)
            if dict(context.trailing).get("x-cache") != "hit-local":
                raise RuntimeError(f"not a memo hit: {context.trailing}")

            def counted() -> tuple[Tally, Tally]:
                opcodes, calls = Tally(), Tally()
                sys.settrace(opcodes.trace)
                for _ in range(CALLS):
                    inference.ModelInfer(message, context)
                sys.settrace(None)
                sys.setprofile(calls.profile)
                for _ in range(CALLS):
                    inference.ModelInfer(message, context)
                sys.setprofile(None)
                return opcodes, calls

            return await asyncio.to_thread(counted)

    return asyncio.run(main())


def count_floor(canned: bytes) -> int:
    """The opcodes grpcio's server threads run for :data:`CALLS` calls (connection and warm-up
    taken out)."""
    tally = Tally()
    # Every thread the server starts from here on is traced (its pool's, lazily, included).
    threading.settrace(tally.trace)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((_handlers({"ModelInfer": canned}, asynchronous=False),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()

    def client(calls: int) -> int:
        before = tally.opcodes
        request = _infer_request().SerializeToString().hex()
        script = _CLIENT % SERVICE
        subprocess.run(
            [sys.executable, "-c", script, f"127.0.0.1:{port}", str(calls), request], check=True
        )
        time.sleep(0.5)  # the last call's closing events
        return tally.opcodes - before

    try:
        client(20)
        many, one = client(CALLS + 1), client(1)
    finally:
        server.stop(None)
        threading.settrace(None)  # type: ignore[arg-type,unused-ignore]  # None turns it off
    return many - one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", action="store_true", help="list the hit's calls")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="grpc-hit-work-") as folder:
        models = Path(folder) / "models"
        subprocess.run([*CACHEFLEET, "samples", str(models)], check=True, capture_output=True)
        opcodes, calls = count_hit(models)
    canned = b"\x00" * 64  # the floor's answer: its size does not change grpcio's Python work
    floor = count_floor(canned) / CALLS
    hit = opcodes.opcodes / CALLS
    python_calls = sum(n for name, n in calls.calls.items() if not name.startswith("C "))
    c_calls = sum(n for name, n in calls.calls.items() if name.startswith("C "))
    print(f"memo hit     {hit:7.0f} opcodes  {python_calls / CALLS:4.0f} Python calls  "
          f"{c_calls / CALLS:4.0f} C calls")  # fmt: skip
    print(f"grpcio floor {floor:7.0f} opcodes per call")
    print(f"the hit adds {hit / floor:.0%} to the floor's Python work")
    if options.calls:
        for name, n in calls.calls.most_common():
            print(f"  {n / CALLS:5.1f}  {name}")


if __name__ == "__main__":
    main()
