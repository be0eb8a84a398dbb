"""``bash scripts/harness chaos``: its own Redis (or Redis Cluster) and two tiered servers, then
the report file."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cachefleet.bench.redis_topology import ClusterProcesses
from harness.chaos.answers import MODEL
from harness.chaos.control import ChaosOptions
from harness.chaos.report import render_table
from harness.chaos.run import run_chaos, run_cluster_chaos

if TYPE_CHECKING:
    from cachefleet.bench.processes import RedisServer


@contextlib.contextmanager
def _fleet(workdir: Path) -> Iterator[tuple[list[str], RedisServer]]:
    from cachefleet.bench.harness import write_samples
    from cachefleet.bench.processes import RedisServer, start_server

    repository = write_samples(workdir / "models", [MODEL])
    redis = RedisServer(workdir)
    redis.start()
    servers = []
    try:
        url = redis.url
        for _ in range(2):
            servers.append(start_server(repository, "tiered", url, workdir, None))
        yield [server.base_url for server in servers], redis
    finally:
        for server in servers:
            server.stop()
        redis.stop()


@contextlib.contextmanager
def _cluster_fleet(workdir: Path) -> Iterator[tuple[list[str], ClusterProcesses]]:
    """Three primaries with a replica each, and two tiered servers in cluster mode."""
    from cachefleet.bench.harness import write_samples
    from cachefleet.bench.processes import start_server

    repository = write_samples(workdir / "models", [MODEL])
    cluster = ClusterProcesses(workdir, primaries=3, replicas=1)
    servers = []
    try:
        cluster.start()
        for _ in range(2):
            servers.append(
                start_server(
                    repository, "tiered", cluster.url, workdir, None, ["--redis-mode", "cluster"]
                )
            )
        yield [server.base_url for server in servers], cluster
    finally:
        for server in servers:
            server.stop()
        cluster.stop()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bash scripts/harness chaos",
        description="The reliability run: load from client processes on two tiered servers "
        "sharing one Redis (or a Redis Cluster) while Redis is killed, paused, filled and "
        "planted with corrupt and foreign entries; every answer is checked against numpy's.",
    )  # fmt: skip
    parser.add_argument(
        "--duration", type=float, default=120.0, help="seconds of load and faults (120)"
    )
    parser.add_argument(
        "--redis-mode", choices=("standalone", "cluster"), default="standalone",
        help="one Redis (default) or a Redis Cluster of three primaries with a replica each, "
        "struck one shard at a time; written to chaos-cluster-<date>.md",
    )  # fmt: skip
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("bench/results"),
        help="folder for the report (bench/results)",
    )
    parser.add_argument(
        "--name", help="file name stem (default chaos-<date>, chaos-cluster-<date> in cluster mode)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run, write ``<output>/<name>.md``; 0 when no request failed and no answer was wrong."""
    args = parse(argv)
    duration = args.duration
    options = ChaosOptions(duration_s=duration, clients=4, cycle_s=min(30.0, duration))
    cluster = args.redis_mode == "cluster"
    load_before = os.getloadavg()[0]
    redis_text = "a Redis Cluster (3 primaries, 1 replica each)" if cluster else "1 Redis"
    print(f"chaos run: {duration:g} s, {options.clients} client processes, "
          f"2 tiered servers, {redis_text}", flush=True)  # fmt: skip
    log = lambda line: print(line, flush=True)  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="cachefleet-chaos-") as folder:
        if cluster:
            with _cluster_fleet(Path(folder)) as (urls, processes):
                report = run_cluster_chaos(urls, processes, options, log)
        else:
            with _fleet(Path(folder)) as (urls, redis):
                report = run_chaos(urls, redis, options, log)
    table = render_table(report)
    command = "bash scripts/harness chaos " + shlex.join(sys.argv[1:] if argv is None else argv)
    suffix = "-cluster" if cluster else ""
    name = args.name or f"chaos{suffix}-{datetime.now(UTC):%Y-%m-%d}"
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / f"{name}.md"
    path.write_text(
        f"# Chaos run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n\n`{command}`\n\n"
        f"{report.duration_s:.0f} s, {report.clients} client processes, {report.servers} "
        f"servers (`--cache tiered`), {redis_text}, {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after (other processes "
        f"included).\n\n{table}\n" + "".join(f"\n- {example}" for example in report.examples)
    )
    print(table)
    print(f"wrote {path}")
    return 0 if report.failed == 0 and report.wrong == 0 else 2


if __name__ == "__main__":
    raise SystemExit(main())
