"""A gRPC load generator: one process per channel, calling ModelInfer back to back.

wrk cannot speak gRPC, so gRPC scenarios use Python senders in processes, like
:mod:`cachefleet.bench.pyload`; the harness compares them with pyload's HTTP senders, so both
sides of a comparison pay the same kind of client. Messages are serialized before the load
starts and sent as bytes (no per-call protobuf work in the client), as wrk sends prebuilt bodies.
"""

from __future__ import annotations

import os
import time

import grpc

from cachefleet.bench.load import LoadResult, LoadSpec, bodies
from cachefleet.bench.pyload import SenderReport, run_senders

#: Seconds one call may take before it counts as an error.
CALL_TIMEOUT_S = 60.0


def run(spec: LoadSpec) -> LoadResult:
    """``spec.base_url`` is the gRPC ``host:port``; ``spec.requests`` a gRPC request set."""
    return run_senders(spec, _send, "python grpc")


def _send(spec: LoadSpec, sender: int, start_at: float) -> SenderReport:
    """One sender: its own channel (one HTTP/2 connection), calls until the duration is over."""
    if spec.cpus:
        os.sched_setaffinity(0, {int(cpu) for cpu in spec.cpus.split(",")})
    latencies: list[float] = []
    errors = 0
    with grpc.insecure_channel(spec.base_url) as channel:
        # No (de)serializers: requests are bytes already, and responses are only counted.
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(spec.requests.path)
        grpc.channel_ready_future(channel).result(timeout=30)
        time.sleep(max(0.0, start_at - time.time()))
        began = time.perf_counter()
        deadline = began + spec.duration_s
        for body in bodies(spec, sender):
            if time.perf_counter() >= deadline:
                break
            sent = time.perf_counter()
            try:
                call(body, timeout=CALL_TIMEOUT_S)
            except grpc.RpcError:
                errors += 1
            latencies.append(time.perf_counter() - sent)
    return SenderReport(latencies, errors, time.perf_counter() - began)
