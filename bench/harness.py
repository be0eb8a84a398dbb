"""Run a plan of scenarios: samples, Redis, one server per cache mode, the peer, in order.

Each server is started when a scenario first needs it and kept (idle, on the same pinned CPU)
until the end, so the plan can put comparable scenarios next to each other in time: the same
model and hit ratio under every cache mode back to back, which keeps changes in other load on
the machine out of the comparisons. Everything started here is registered with an ExitStack,
so a failure or Ctrl-C stops it all. A scenario that fails becomes a row that says why, and
the run goes on: a partial table with reasons beats no table.
"""

from __future__ import annotations

import contextlib
import os
import platform
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cachefleet.bench import (
    grpc_bodies,
    grpcload,
    http_floor,
    peer,
    perf_analyzer,
    processes,
    profiling,
    pyload,
    triton_peer,
    wrk,
)
from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.measure import Measurement, Target, measure, request_set, settle
from cachefleet.bench.pinning import CpuPlan
from cachefleet.bench.redis_topology import ClusterProcesses, TopologyError
from cachefleet.bench.scenarios import CLUSTER_CACHES, Scenario

Log = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """How hard and how long to load, with which generator, pinned or not."""

    connections: int = 8
    duration_s: float = 5.0
    warmup_s: float = 1.0
    #: Seconds of the one-connection latency probe after each 100%-hit scenario (0: none).
    probe_s: float = 2.0
    #: Sample the server with py-spy during each measured load (see bench/profiling.py).
    profile: bool = False
    generator: str = "wrk"
    wrk_threads: int = 2
    cpus: CpuPlan = field(default_factory=lambda: CpuPlan(None, None))
    peer_python: Path | None = None
    #: Python of the Triton peer's venv (None: the default under .cache/).
    triton_python: Path | None = None
    #: ``--cache-admission`` of every ``cachefleet serve`` started (None: the server's default).
    cache_admission: str | None = None


@dataclass
class Failure:
    scenario: Scenario
    reason: str


@dataclass
class RunRecord:
    """Everything a report needs: figures, failures and the conditions of the run."""

    options: BenchOptions
    started: datetime
    measurements: list[Measurement] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    generator_name: str = ""
    #: 1-minute load average at the start and the end: other work on the machine shows here.
    load_average: tuple[float, float] = (0.0, 0.0)

    @property
    def machine(self) -> str:
        return f"{len(os.sched_getaffinity(0))}cpu-{platform.machine()}"


def load_runner(
    options: BenchOptions, scenario: Scenario | None = None
) -> Callable[[LoadSpec], LoadResult]:
    """The generator asked for; wrk unless it is missing, then the Python senders. HTTP vs gRPC
    scenarios use Python senders in processes on both sides (wrk cannot speak gRPC); the judged
    scenarios (``--judge``) perf_analyzer over theirs, whatever the generator asked for."""
    if scenario is not None and scenario.group == "judge":
        transport = scenario.transport
        return lambda spec: perf_analyzer.run(spec, transport)
    if scenario is not None and scenario.group == "transport":
        return grpcload.run if scenario.transport == "grpc" else pyload.run
    if options.generator == "wrk" and wrk.available():
        return lambda spec: wrk.run(spec, options.wrk_threads)
    if options.generator == perf_analyzer.NAME and perf_analyzer.available():
        return perf_analyzer.runner(pyload.run)
    return pyload.run


def _generator_name(options: BenchOptions) -> str:
    if options.generator == "wrk" and wrk.available():
        return f"wrk -t{options.wrk_threads} -c{options.connections} (infer.lua)"
    python = f"Python http.client, {options.connections} processes"
    if options.generator == perf_analyzer.NAME and perf_analyzer.available():
        return (
            f"perf_analyzer --concurrency-range {options.connections} (100% hits; "
            f"{python} for the rest)"
        )
    return python


def run_plan(plan: list[Scenario], options: BenchOptions, log: Log) -> RunRecord:
    record = RunRecord(options, datetime.now(UTC))
    started_load = os.getloadavg()[0]
    if options.generator == "wrk" and not wrk.available():
        record.notes.append("wrk is not installed: the Python load generator ran instead.")
    if options.profile and profiling.executable() is None:
        record.notes.append(
            "py-spy is not installed: no profiles (pip install 'cachefleet[bench]')"
        )
    if options.generator == perf_analyzer.NAME and not perf_analyzer.available():
        record.notes.append(
            "perf_analyzer is not installed (bash scripts/get-perf-analyzer): the Python load "
            "generator ran instead."
        )
    elif options.generator == perf_analyzer.NAME:
        record.notes.append(
            "perf_analyzer sends its own input (random, made once) in the 100%-hit scenarios: "
            "its first requests miss, every later one hits."
        )
    if any(s.group == "judge" for s in plan):
        record.notes.append(
            "perf_analyzer measured the 100%-hit scenarios again (--judge), with "
            f"--concurrency-range {options.connections}, over HTTP and gRPC; it sends its own "
            "input (random, made once): its first requests miss, every later one hits."
            + ("" if perf_analyzer.available() else " It is not installed: they failed.")
        )
    record.generator_name = _generator_name(options)
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cachefleet-bench-")))
        log(f"working folder {workdir} (removed at the end)")
        repository = write_samples(workdir / "models", sorted({s.model for s in plan}))
        redis_url = _redis(plan, workdir, options, stack, record, log)
        cluster_url = _cluster(plan, workdir, options, stack, record, log)
        targets: dict[tuple[str, str], Target | BenchError] = {}
        for scenario in plan:
            key = (scenario.server, scenario.cache)
            if key not in targets:
                try:
                    url = cluster_url if scenario.cache in CLUSTER_CACHES else redis_url
                    if scenario.server == "floor":
                        floored = sorted({s.model for s in plan if s.server == "floor"})
                        targets[key] = _start_floor(targets, floored, options, workdir, stack, log)
                    else:
                        targets[key] = _start_target(
                            *key, repository, url, workdir, options, stack, record, log,
                            models=sorted({s.model for s in plan}),
                        )  # fmt: skip
                except BenchError as error:
                    log(f"  {scenario.server} {scenario.cache}: {str(error).splitlines()[0]}")
                    targets[key] = error
            target = targets[key]
            if isinstance(target, BenchError):
                record.failures.append(Failure(scenario, str(target).splitlines()[0]))
                continue
            settle(*(t.pid for t in targets.values() if isinstance(t, Target)))
            _run_scenario(target, scenario, options, record, log, workdir)
    record.load_average = (started_load, os.getloadavg()[0])
    return record


def write_samples(folder: Path, models: Iterable[str] = ()) -> Path:
    """The sample repository, written by ``cachefleet samples`` as a user would: only ``models``
    when given (every sample otherwise). A server loads every model of its repository, so one
    without the DenseNets it is not measured on starts in a fraction of the time."""
    command = [sys.executable, "-P", "-m", "cachefleet.cli.main", "samples", str(folder)]
    command += [argument for model in models for argument in ("--model", model)]
    completed = subprocess.run(command, capture_output=True, text=True, check=False)
    if completed.returncode != 0:
        raise BenchError(f"cachefleet samples failed:\n{completed.stderr[-2000:]}")
    return folder


def _redis(
    plan: Iterable[Scenario],
    workdir: Path,
    options: BenchOptions,
    stack: contextlib.ExitStack,
    record: RunRecord,
    log: Log,
) -> str | None:
    if not any(s.cache in ("redis", "tiered") for s in plan):
        return None
    redis = processes.start_redis(workdir, options.cpus.client)
    if redis is None:
        record.notes.append("redis-server is not installed: redis and tiered scenarios failed.")
        return None
    stack.callback(redis.stop)
    log(f"redis-server at {redis.url}")
    return redis.url


def _cluster(
    plan: Iterable[Scenario],
    workdir: Path,
    options: BenchOptions,
    stack: contextlib.ExitStack,
    record: RunRecord,
    log: Log,
) -> str | None:
    """A three-primary Redis Cluster on the client CPUs, when a scenario asks for one."""
    if not any(s.cache in CLUSTER_CACHES for s in plan):
        return None
    folder = workdir / "cluster"
    folder.mkdir()
    cluster = ClusterProcesses(folder, primaries=3, replicas=0, cpus=options.cpus.client)
    stack.callback(cluster.stop)
    try:
        cluster.start()
    except TopologyError as error:
        record.notes.append(f"no Redis Cluster: {str(error).splitlines()[0]}")
        return None
    log(f"Redis Cluster (3 primaries) seeded at {cluster.url}")
    return cluster.url


def _start_target(
    server: str,
    cache: str,
    repository: Path,
    redis_url: str | None,
    workdir: Path,
    options: BenchOptions,
    stack: contextlib.ExitStack,
    record: RunRecord,
    log: Log,
    models: list[str],
) -> Target:
    if server == "triton":
        triton, base_url, metrics_url, grpc_address = triton_peer.start(
            repository, models, options.triton_python, workdir, options.cpus.server
        )
        stack.callback(triton.stop)
        note = triton_peer.describe(options.triton_python)
        if note not in record.notes:
            record.notes.append(note)
        log(f"{triton.name} at {base_url}, gRPC at {grpc_address}")
        return Target(base_url, triton.pid, metrics_url, grpc_address)
    if server == "kserve":
        process, base_url = peer.start(
            repository, "simple", options.peer_python, workdir, options.cpus.server
        )
        stop, pid, name = process.stop, process.pid, process.name
        note = f"KServe peer: {peer.describe(options.peer_python)}"
        if note not in record.notes:
            record.notes.append(note)
    else:
        if cache in ("redis", "tiered", *CLUSTER_CACHES) and redis_url is None:
            raise BenchError("no Redis for this cache mode (redis-server is not installed)")
        extra = list(options.cpus.server_args)
        if options.cache_admission is not None:
            extra += ["--cache-admission", options.cache_admission]
        if cache in CLUSTER_CACHES:
            cache, extra = CLUSTER_CACHES[cache], [*extra, "--redis-mode", "cluster"]
        ours = processes.start_server(
            repository, cache, redis_url, workdir, options.cpus.server, extra
        )
        stack.callback(ours.stop)
        log(f"{ours.name} at {ours.base_url}, gRPC at {ours.grpc_url}")
        return Target(ours.base_url, ours.pid, grpc_address=ours.grpc_url)
    stack.callback(stop)
    log(f"{name} at {base_url}")
    return Target(base_url, pid)


def _start_floor(
    targets: dict[tuple[str, str], Target | BenchError],
    models: list[str],
    options: BenchOptions,
    workdir: Path,
    stack: contextlib.ExitStack,
    log: Log,
) -> Target:
    """The HTTP floor, answering each of ``models``' hit as one of our servers (the local
    cache's, if up) answers it (every model a run loads is loaded by each of its servers)."""
    ours = [
        target
        for (server, _), target in sorted(targets.items(), key=lambda kv: kv[0][1] != "local")
        if server == "cachefleet" and isinstance(target, Target)
    ]
    if not ours:
        raise BenchError("no cachefleet server is up to capture the floor's answer from")
    base_url = ours[0].base_url
    sets = [request_set(base_url, Scenario("hits", model, "local", 1.0)) for model in models]
    answers = http_floor.capture(base_url, *sets)
    process, base_url = http_floor.start(answers, workdir, options.cpus.server)
    stack.callback(process.stop)
    log(f"{process.name} at {base_url}")
    return Target(base_url, process.pid)


def _run_scenario(
    target: Target,
    scenario: Scenario,
    options: BenchOptions,
    record: RunRecord,
    log: Log,
    workdir: Path,
) -> None:
    try:
        requests = request_set(target.base_url, scenario)
        result = measure(
            target, scenario, requests, run_load=load_runner(options, scenario),
            connections=options.connections, duration_s=options.duration_s,
            warmup_s=options.warmup_s, client_cpus=options.cpus.client,
            probe_s=options.probe_s, profile_dir=workdir if options.profile else None,
            load=_grpc_load(target, scenario, requests),
        )  # fmt: skip
    except BenchError as error:
        reason = str(error).splitlines()[0]
        log(f"  {scenario.label:<38} failed: {reason}")
        record.failures.append(Failure(scenario, reason))
        return
    record.measurements.append(result)
    load = result.load
    log(
        f"  {scenario.label:<38} {load.throughput:9.0f} req/s  p50 {load.p50_ms:7.2f} ms"
        f"  p99 {load.p99_ms:7.2f} ms  errors {load.errors}"
    )


def _grpc_load(
    target: Target, scenario: Scenario, requests: RequestSet
) -> tuple[str, RequestSet] | None:
    """Where a gRPC scenario's load goes; the warm-up posts the same tensors over HTTP."""
    if scenario.transport != "grpc":
        return None
    if target.grpc_address is None:
        raise BenchError("this server has no gRPC endpoint")
    return target.grpc_address, grpc_bodies.grpc_request_set(requests)
