"""``cachefleet bench --chaos``: its own Redis and two tiered servers, then the report file."""

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

from cachefleet.bench.chaos.control import ChaosOptions
from cachefleet.bench.chaos.report import render_table
from cachefleet.bench.chaos.run import run_chaos

if TYPE_CHECKING:
    from cachefleet.bench.processes import RedisServer


@contextlib.contextmanager
def _fleet(workdir: Path) -> Iterator[tuple[list[str], RedisServer]]:
    from cachefleet.bench.harness import write_samples
    from cachefleet.bench.processes import RedisServer, start_server

    repository = write_samples(workdir / "models")
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


def run_command(args: argparse.Namespace) -> int:
    """``cachefleet bench --chaos [--duration S] [--output DIR] [--name STEM]``."""
    duration = args.duration if args.duration is not None else 120.0
    options = ChaosOptions(duration_s=duration, clients=4, cycle_s=min(30.0, duration))
    load_before = os.getloadavg()[0]
    print(f"cachefleet bench --chaos: {duration:g} s, {options.clients} client processes, "
          "2 tiered servers, 1 Redis", flush=True)  # fmt: skip
    with (
        tempfile.TemporaryDirectory(prefix="cachefleet-chaos-") as folder,
        _fleet(Path(folder)) as (urls, redis),
    ):
        report = run_chaos(urls, redis, options, lambda line: print(line, flush=True))
    table = render_table(report)
    command = "cachefleet bench " + shlex.join(sys.argv[2:] if len(sys.argv) > 1 else [])
    name = args.name or f"chaos-{datetime.now(UTC):%Y-%m-%d}"
    args.output.mkdir(parents=True, exist_ok=True)
    path = args.output / f"{name}.md"
    path.write_text(
        f"# Chaos run, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC\n\n`{command}`\n\n"
        f"{report.duration_s:.0f} s, {report.clients} client processes, {report.servers} "
        f"servers (`--cache tiered`), one Redis, {os.cpu_count()} CPUs, load average "
        f"{load_before:.1f} before and {os.getloadavg()[0]:.1f} after (other processes "
        f"included).\n\n{table}\n" + "".join(f"\n- {example}" for example in report.examples)
    )
    print(table)
    print(f"wrote {path}")
    return 0 if report.failed == 0 and report.wrong == 0 else 2
