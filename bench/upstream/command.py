"""``cachefleet bench --upstream``: start real Triton and cachefleet in front of it, measure
both sides of each figure back to back, and write the Markdown report.

Processes start when their figure needs them and stop after it, so idle servers do not share
a core with the measured ones: the two Tritons (one with its local response cache, one with no
cache at all) and a front for each, then the fleet of replicas in front of the cacheless
Triton (the one process kept from the first figures), then as many Tritons with a local cache
each. A scenario or a fleet that fails becomes a line of the report that says why, and the run
goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from cachefleet.bench import perf_analyzer, pinning, processes, pyload, triton_peer, wrk
from cachefleet.bench.bodies import (
    RequestSet,
    build_request_set,
    inputs_from_metadata,
    new_nonce,
)
from cachefleet.bench.errors import BenchError
from cachefleet.bench.harness import write_samples
from cachefleet.bench.load import LoadResult, LoadSpec
from cachefleet.bench.measure import Measurement, Target, get_json, measure, request_set
from cachefleet.bench.triton_peer import TritonPeer
from cachefleet.bench.upstream import fleet, plan, servers
from cachefleet.bench.upstream.fleet import Fleet, FleetResult, Workload
from cachefleet.bench.upstream.plan import Pins, UpstreamScenario
from cachefleet.bench.upstream.report import Record, write_report

#: The fleet's local caches, each about 500 of simple's answers (far fewer than the workload's
#: distinct inputs), as measured when these were chosen: a cachefleet entry of simple takes
#: 750 bytes in the local tier (key, header, both outputs), one in Triton's local cache 256.
REPLICA_LOCAL_BYTES = 375_000
TRITON_LOCAL_BYTES = 128 * 2**10
Log = Callable[[str], None]


def run_command(args: argparse.Namespace) -> int:
    quick = bool(args.quick)
    record = Record(
        command="cachefleet bench " + shlex.join(sys.argv[2:]),
        started=datetime.now(UTC),
        pins=Pins.of(pinning.plan(not args.no_pin)),
        duration_s=args.duration if args.duration is not None else (1.0 if quick else 10.0),
        warmup_s=args.warmup if args.warmup is not None else (0.0 if quick else 2.0),
        probe_s=0.0 if quick else 2.0,
        connections=args.connections,
        replicas=2 if quick else 4,
        workload=Workload(distinct=300, draws=1500) if quick else Workload(),
        fleet_s=120.0 if quick else 300.0,
        load_average=(os.getloadavg()[0], 0.0),
    )
    models = tuple(args.models or (("simple",) if quick else plan.MODELS))
    if not wrk.available():
        record.notes.append("wrk is not installed: the Python senders ran in its place.")
    if not perf_analyzer.available():
        record.notes.append(
            "perf_analyzer is not installed (bash scripts/get-perf-analyzer): no gRPC rows."
        )
    log: Log = lambda line: print(line, flush=True)  # noqa: E731
    log(f"cachefleet bench --upstream: {record.pins.description}")
    try:
        with contextlib.ExitStack() as stack:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="cachefleet-up-"))
            )
            served = sorted({*models, fleet.MODEL})
            repository = write_samples(workdir / "models", served)
            servers.token_file(workdir)
            # Without a cache: Triton alone on misses, then the upstream of the fleet.
            bare = servers.launch_triton(
                stack, repository, served, args.triton_python, workdir, record.pins.triton, None
            )
            _side_by_side(record, models, repository, workdir, args.triton_python, bare, log)
            try:
                _fleets(record, repository, workdir, args.triton_python, bare, log)
            except BenchError as error:
                reason = str(error).splitlines()[0]
                log(f"  fleet: failed: {reason}")
                record.failures.append(("(c) the fleets", reason))
    except BenchError as error:
        print(f"cachefleet bench --upstream: {error}", file=sys.stderr)
        return 1
    record.load_average = (record.load_average[0], os.getloadavg()[0])
    record.notes.append(triton_peer.describe(args.triton_python))
    name = args.name or f"{record.started:%Y-%m-%d}-upstream"
    path = write_report(record, args.output, name)
    print(f"wrote {path}")
    return 0 if not record.failures else 2


def _side_by_side(
    record: Record,
    models: Sequence[str],
    repository: Path,
    workdir: Path,
    python: Path | None,
    bare: TritonPeer,
    log: Log,
) -> None:
    """Figures (a) and (b): each scenario on Triton alone, then through cachefleet."""
    pins = record.pins
    with contextlib.ExitStack() as stack:
        cached = servers.launch_triton(
            stack, repository, models, python, workdir, pins.triton, triton_peer.CACHE_BYTES
        )
        cached.wait_ready(models)
        bare.wait_ready(models)
        hit_front = servers.start_front(
            stack, cached, models, workdir, pins.front, ["--cache", "local"]
        )
        # Triton without a cache reports response_cache off: the front caches it all the same.
        miss_front = servers.start_front(
            stack, bare, models, workdir, pins.front, ["--cache", "local", "--cache-all-models"]
        )
        log(f"Triton (local cache) at {cached.base_url}, without a cache at {bare.base_url}; "
            f"fronts at {hit_front.base_url} and {miss_front.base_url}")  # fmt: skip
        targets: dict[tuple[plan.Section, plan.Side], Target] = {
            ("hits", "triton"): servers.triton_target(cached),
            ("hits", "front"): servers.front_target(hit_front, cached),
            ("misses", "triton"): servers.triton_target(bare),
            ("misses", "front"): servers.front_target(miss_front, bare),
        }
        for scenario in plan.build(models, perf_analyzer.available()):
            try:
                measured = _measure(record, scenario, targets[scenario.section, scenario.side])
            except BenchError as error:
                reason = str(error).splitlines()[0]
                log(f"  {scenario.label}: failed: {reason}")
                record.failures.append((scenario.label, reason))
                continue
            record.rows.append((scenario, measured))
            load = measured.load
            log(f"  {scenario.label:<62} {load.throughput:8.0f} req/s  p99 {load.p99_ms:7.2f} ms"
                f"  CPU {measured.cpu_ms_per_request:.3f} ms/req")  # fmt: skip


def _measure(record: Record, scenario: UpstreamScenario, target: Target) -> Measurement:
    harness_scenario = scenario.scenario
    requests = request_set(target.base_url, harness_scenario)
    run_load: Callable[[LoadSpec], LoadResult]
    load = None
    if scenario.generator == "perf_analyzer":
        if target.grpc_address is None:
            raise BenchError("this server has no gRPC endpoint")
        run_load, load = (lambda spec: perf_analyzer.run(spec, "grpc")), (
            target.grpc_address, requests,
        )  # fmt: skip
    else:
        run_load = _http_runner()
    return measure(
        target, harness_scenario, requests, run_load=run_load,
        connections=scenario.connections or record.connections,
        duration_s=record.duration_s, warmup_s=record.warmup_s,
        client_cpus=record.pins.generator(scenario.side),
        probe_s=record.probe_s if scenario.connections is None else 0.0, load=load,
    )  # fmt: skip


def _http_runner() -> Callable[[LoadSpec], LoadResult]:
    """wrk (two threads, as ``cachefleet bench``), or the Python senders where it is missing
    (the report names the generator)."""
    return (lambda spec: wrk.run(spec, 2)) if wrk.available() else pyload.run


def _fleets(
    record: Record,
    repository: Path,
    workdir: Path,
    python: Path | None,
    upstream: TritonPeer,
    log: Log,
) -> None:
    """Figure (c): the replicas sharing Redis in front of ``upstream`` (Triton without a
    cache), then as many Tritons with a local cache each."""
    pins, count = record.pins, record.replicas
    models = [fleet.MODEL]
    with contextlib.ExitStack() as stack:
        redis = processes.start_redis(workdir, pins.triton)
        if redis is None:
            raise BenchError("redis-server is not installed: no fleet figure")
        stack.callback(redis.stop)
        assert redis.process is not None
        cache = ["--cache", "tiered", "--redis-url", redis.url, "--cache-all-models",
                 "--local-cache-size", str(REPLICA_LOCAL_BYTES)]  # fmt: skip
        replicas = [
            servers.start_front(stack, upstream, models, workdir, pins.front, cache, f"replica {i}")
            for i in range(count)
        ]
        ours = Fleet(
            f"{count} cachefleet replicas (tiered, one Redis) -> 1 Triton without a cache",
            tuple(r.base_url for r in replicas),
            tuple(f"{r.base_url}/metrics" for r in replicas),
            (upstream.base_url,),
            (*(r.pid for r in replicas), upstream.process.pid, redis.process.pid),
        )
        log(f"fleet: {ours.name}")
        record.fleets.append(_run_fleet(record, ours, log))
    with contextlib.ExitStack() as stack:
        tritons = [
            servers.launch_triton(
                stack, repository, models, python, workdir, pins.front, TRITON_LOCAL_BYTES
            )
            for _ in range(count)
        ]
        for peer in tritons:
            peer.wait_ready(models)
        theirs = Fleet(
            f"{count} Tritons, a local cache each",
            tuple(t.base_url for t in tritons),
            tuple(t.metrics_url for t in tritons),
            tuple(t.base_url for t in tritons),
            tuple(t.process.pid for t in tritons),
        )
        log(f"fleet: {theirs.name}")
        record.fleets.append(_run_fleet(record, theirs, log))


def _run_fleet(record: Record, target: Fleet, log: Log) -> FleetResult:
    workload = record.workload
    metadata = get_json(target.base_urls[0], f"/v2/models/{fleet.MODEL}")
    outputs = [str(entry["name"]) for entry in metadata.get("outputs", [])]
    inputs = build_request_set(
        fleet.MODEL, inputs_from_metadata(metadata), outputs, "binary",
        warm_count=workload.distinct,
    )  # fmt: skip
    per_server = max(1, record.connections // len(target.base_urls))
    nonce = new_nonce()

    def spec(base_url: str, requests: RequestSet) -> LoadSpec:
        cpus = record.pins.triton
        return LoadSpec(base_url, requests, per_server, record.fleet_s, 1.0, nonce, cpus)

    result = fleet.run(target, workload, workload.request_sets(inputs, len(target.base_urls)), spec)
    ratio = result.counters.hit_ratio
    log(f"  {result.throughput:8.0f} req/s, {result.counters.computed:.0f} requests computed "
        f"upstream for {result.distinct} distinct inputs, hit ratio "
        f"{'-' if ratio is None else f'{ratio:.1%}'}, p99 {result.p99_ms:.2f} ms")  # fmt: skip
    return result
