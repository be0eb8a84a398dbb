"""``cachefleet bench --batching``: start one server on the samples and their variants, run each
scenario against it in turn, and write the Markdown report."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shlex
import sys
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from cachefleet.bench import pinning, processes
from cachefleet.bench.batching import senders
from cachefleet.bench.batching.report import Row, write_report
from cachefleet.bench.batching.traffic import ModelInputs
from cachefleet.bench.batching.variants import write_variants
from cachefleet.bench.errors import BenchError
from cachefleet.bench.harness import write_samples
from cachefleet.bench.measure import get_json


@dataclass(frozen=True)
class Scenario:
    group: str
    model: str
    variant: str
    rows: int
    repeat_share: float
    clients: int


def plan(quick: bool) -> list[Scenario]:
    batching = "dynamic batching: 0% hits, 16 single-row clients"
    rows = "row cache: 8-row requests, 8 clients, a share of rows repeated"
    scenarios = []
    for batched, unbatched in (
        ("densenet_batch", "densenet_unbatched"),
        ("simple_batched", "simple"),
    ):
        scenarios += [
            Scenario(batching, batched, "dynamic batching", 1, 0.0, 16),
            Scenario(batching, unbatched, "no batching", 1, 0.0, 16),
        ]
    shares = (0.5,) if quick else (0.0, 0.5, 0.9)
    for with_rows, whole in (("densenet_batch", "densenet_whole"), ("simple_rows", "simple_whole")):
        for share in shares:
            scenarios += [
                Scenario(rows, with_rows, f"row cache, {share:.0%} repeated", 8, share, 8),
                Scenario(rows, whole, f"whole-request cache, {share:.0%} repeated", 8, share, 8),
            ]
    return scenarios


def run_command(args: argparse.Namespace) -> int:
    duration_s = args.duration if args.duration is not None else (3.0 if args.quick else 10.0)
    cpus = pinning.plan(not args.no_pin)
    extra = [*cpus.server_args, "--execution-provider", args.execution_provider]
    if args.cache_admission is not None:
        extra += ["--cache-admission", args.cache_admission]
    started = datetime.now(UTC)
    load_before = os.getloadavg()[0]
    rows: list[Row] = []
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="cachefleet-batch-")))
        try:
            repository = write_samples(workdir / "models")
            write_variants(repository)
            server = processes.start_server(repository, "local", None, workdir, cpus.server, extra)
            base_url = server.base_url
        except BenchError as error:
            print(f"cachefleet bench --batching: {error}", file=sys.stderr)
            return 1
        stack.callback(server.stop)
        print(f"server at {base_url}, {cpus.description}", flush=True)
        for scenario in plan(bool(args.quick)):
            try:
                rows.append(_measure(scenario, base_url, server.pid, duration_s, cpus.client))
            except BenchError as error:
                print(f"  {scenario.model} {scenario.variant}: failed: {error}", flush=True)
                continue
            print("  " + rows[-1].line(), flush=True)
    name = args.name or f"batching-{started:%Y-%m-%d}"
    command = "cachefleet bench " + shlex.join(sys.argv[2:])
    load = (load_before, os.getloadavg()[0])
    path = write_report(rows, args.output, name, command, started, load, cpus.description)
    print(f"wrote {path}")
    return 0


def _measure(
    scenario: Scenario, base_url: str, pid: int, duration_s: float, cpus: str | None
) -> Row:
    load = senders.LoadPlan(
        base_url=base_url,
        model=scenario.model,
        inputs=_inputs(base_url, scenario.model),
        rows=scenario.rows,
        repeat_share=scenario.repeat_share,
        clients=scenario.clients,
        duration_s=duration_s,
        nonce=secrets.randbelow(100_000_000),
        cpus=cpus,
    )
    senders.warm(load)
    before = (*_counters(base_url, scenario.model), processes.cpu_seconds(pid))
    figures = senders.run(load)
    after = (*_counters(base_url, scenario.model), processes.cpu_seconds(pid))
    executions, inferred, cpu_s = (b - a for a, b in zip(before, after, strict=True))
    return Row(
        scenario.group, scenario.model, scenario.variant, figures, cpu_s, executions, inferred
    )


def _inputs(base_url: str, model: str) -> ModelInputs:
    metadata = get_json(base_url, f"/v2/models/{model}")
    inputs = metadata["inputs"]
    return ModelInputs(
        names=tuple(str(item["name"]) for item in inputs),
        datatypes=tuple(str(item["datatype"]) for item in inputs),
        row_shapes=tuple(tuple(int(dim) for dim in item["shape"][1:]) for item in inputs),
    )


def _counters(base_url: str, model: str) -> tuple[float, float]:
    """(executions, rows inferred) of ``model`` so far, from the server's Triton counters."""
    try:
        with urllib.request.urlopen(f"{base_url}/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError) as error:
        raise BenchError(f"GET {base_url}/metrics failed: {error}") from None
    values = {"nv_inference_exec_count": 0.0, "nv_inference_count": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values and sample.labels.get("model") == model:
                values[sample.name] += sample.value
    return values["nv_inference_exec_count"], values["nv_inference_count"]
