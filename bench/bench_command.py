"""`cachefleet bench`: the benchmark harness.

Runs every scenario of design section 9 in one go (no cache, local, redis, tiered; ``simple``
and ``densenet_onnx``; 100% hits, a hit-ratio sweep, 0% hits; HTTP against gRPC on the same
model and hit ratio; our JSON path against KServe's Python server; our local cache against
Triton's) with ``wrk`` as the load generator (Python senders in processes where HTTP and gRPC are
compared), and writes ``bench/results/<date>-<machine>.md`` (tables and the targets) and
``.png`` (throughput and p99 per scenario), with the HTTP floor (a bare uvicorn app answering
``simple``'s request with canned bytes) beside the ``simple`` hits, and remakes the docs site's
benchmark page, ``docs/benchmarks.md``, from that report. With ``--judge`` (on by default where
Triton is compared and perf_analyzer is installed), Triton's perf_analyzer measures the 100%
hits again, over HTTP beside wrk and over gRPC, and the report sets each rate beside Triton's.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachefleet.bench.scenarios import Transport

HELP = "the benchmark harness: every cache mode side by side under wrk, written to bench/results/."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quick", action="store_true",
        help="smoke run: simple only, one sweep point, 2 s per scenario, no warm-up, no peers.",
    )  # fmt: skip
    parser.add_argument(
        "--models", nargs="+", help="models to load (default: simple densenet_onnx)"
    )
    parser.add_argument(
        "--caches", nargs="+",
        choices=("none", "local", "redis", "tiered", "redis-cluster", "tiered-cluster"),
        help="cache modes (default: the first four; redis-cluster and tiered-cluster run over "
        "a three-primary Redis Cluster started for the run)",
    )  # fmt: skip
    parser.add_argument("--sweep", nargs="*", type=_ratio, help="hit ratios between 0 and 1")
    parser.add_argument("--connections", type=int, default=8, help="concurrent connections (8)")
    parser.add_argument("--duration", type=float, help="seconds per scenario (5; quick: 2)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds first (1; quick: 0)")
    parser.add_argument(
        "--generator", "--load", dest="generator", default="wrk",
        choices=("wrk", "python", "perf_analyzer"),
        help="load generator: wrk (default; the Python senders if wrk is missing), python, or "
        "perf_analyzer (Triton's; 100%% hit scenarios only, the Python senders for the rest; "
        "bash scripts/get-perf-analyzer installs it)",
    )  # fmt: skip
    parser.add_argument(
        "--judge", action=argparse.BooleanOptionalAction, default=None,
        help="measure the 100%% hits again with perf_analyzer, Triton's own load generator, "
        "right after wrk: our local and tiered caches, Triton and the HTTP floor over HTTP, "
        "ours and Triton over gRPC (-i grpc), same concurrency, reported beside wrk's figures "
        "with each of ours as a share of Triton's (default: on when perf_analyzer is installed "
        "and Triton is compared, unless --quick; with --load perf_analyzer, gRPC only)",
    )  # fmt: skip
    parser.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (2)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin CPUs with taskset")
    parser.add_argument(
        "--peer", action=argparse.BooleanOptionalAction, default=None,
        help="compare with KServe's Python server (default: on unless --quick)",
    )  # fmt: skip
    parser.add_argument(
        "--grpc", action=argparse.BooleanOptionalAction, default=True,
        help="compare HTTP and gRPC on each model at a 90%% hit ratio (default: on)",
    )  # fmt: skip
    parser.add_argument(
        "--floor", action=argparse.BooleanOptionalAction, default=True,
        help="measure the HTTP floor, a bare uvicorn app (uvloop, httptools) answering simple's "
        "request with the bytes our server answers it with, beside the simple 100%% hits, and "
        "report each server's rate as a share of it (default: on wherever simple runs)",
    )  # fmt: skip
    parser.add_argument(
        "--cache-admission", choices=("auto", "always"),
        help="--cache-admission of every cachefleet serve the run starts (default: the "
        "server's own, auto); the report shows each tier's decision per scenario",
    )  # fmt: skip
    parser.add_argument(
        "--peer-python", type=Path,
        help="python of the KServe peer venv (default .cache/kserve-peer/bin/python)",
    )  # fmt: skip
    parser.add_argument(
        "--triton", action=argparse.BooleanOptionalAction, default=None,
        help="compare cache hits with real Triton's local response cache (default: on unless "
        "--quick)",
    )  # fmt: skip
    parser.add_argument(
        "--triton-python", type=Path,
        help="python of the Triton peer venv (default .cache/triton-peer/bin/python)",
    )  # fmt: skip
    parser.add_argument(
        "--output", type=Path, default=Path("bench/results"), help="folder for the .md and .png"
    )
    parser.add_argument("--name", help="file name stem (default <date>-<machine>)")
    parser.add_argument(
        "--docs-page", type=Path,
        help="the docs page remade from this run's report (default: docs/benchmarks.md when "
        "--output is bench/results and docs/ is here, unless --quick; none otherwise)",
    )  # fmt: skip
    parser.add_argument(
        "--profile", action="store_true",
        help="sample the server with py-spy during each load; the report says where time goes",
    )  # fmt: skip
    parser.add_argument(
        "--chaos", action=_MovedChaos, nargs=0, help=argparse.SUPPRESS
    )  # the chaos run left this command: say where it is rather than "unrecognized"
    parser.add_argument(
        "--batching", action="store_true",
        help="instead: dynamic batching and the row cache under load (densenet_batch, simple), "
        "written to bench/results/batching-<date>.md",
    )  # fmt: skip
    parser.add_argument(
        "--identity", action="store_true",
        help="instead: what cache identity costs, without a server: the key per request "
        "(densenet and simple inputs) and the fingerprint at load of the samples",
    )  # fmt: skip
    parser.add_argument(
        "--upstream", action="store_true",
        help="instead: cachefleet in front of real Triton (serve --upstream) against Triton "
        "alone: hits against Triton's local cache by wrk and perf_analyzer, the miss through "
        "the hop against Triton without a cache, and a fleet of replicas sharing Redis against "
        "as many Tritons on a Zipf workload, written to bench/results/<date>-upstream.md "
        "(--triton-python names the Triton venv)",
    )  # fmt: skip
    parser.add_argument(
        "--execution-provider", choices=("auto", "cpu", "cuda", "tensorrt"), default="auto",
        help="the server's ONNX Runtime provider in the --batching run (auto)",
    )  # fmt: skip


class _MovedChaos(argparse.Action):
    """``--chaos``, which ``cachefleet bench`` no longer has: an error that says where it went."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        parser.error(
            "the chaos run is not part of cachefleet bench any more: from a checkout of the "
            "repository, run `bash scripts/harness chaos [--duration S] [--redis-mode cluster]`"
        )


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"a hit ratio is between 0 and 1, not {text}")
    return value


def _docs_page(args: argparse.Namespace) -> Path | None:
    """Where this run's docs page goes: asked for, or the site's own for a full run in the
    repository (a --quick smoke run never replaces the published figures)."""
    from cachefleet.bench import report

    if args.docs_page is not None:
        return Path(args.docs_page)
    if args.quick:
        return None
    if args.output == Path("bench/results") and report.DOCS_PAGE.parent.is_dir():
        return report.DOCS_PAGE
    return None


def _judged_transports(args: argparse.Namespace, triton: bool) -> tuple[Transport, ...]:
    """Over which transports perf_analyzer measures the 100% hits again (``--judge``): none
    unless asked or, by default, unless perf_analyzer is here to judge us against Triton;
    over gRPC only when it is already the generator (it measured the HTTP hits)."""
    from cachefleet.bench import perf_analyzer

    judge = args.judge
    if judge is None:
        judge = triton and not args.quick and perf_analyzer.available()
    if not judge:
        return ()
    return ("grpc",) if args.generator == perf_analyzer.NAME else ("http", "grpc")


def run(args: argparse.Namespace) -> int:
    if args.batching:
        from cachefleet.bench import batching

        return batching.run_command(args)
    if args.identity:
        from cachefleet.bench import identity

        return identity.run_command(args)
    if args.upstream:
        from cachefleet.bench.upstream import command as upstream

        return upstream.run_command(args)
    from cachefleet.bench import chart, harness, pinning, report, scenarios, targets
    from cachefleet.bench.errors import BenchError

    quick = bool(args.quick)
    triton = args.triton if args.triton is not None else not quick
    options = harness.BenchOptions(
        connections=args.connections,
        duration_s=args.duration if args.duration is not None else (2.0 if quick else 5.0),
        warmup_s=args.warmup if args.warmup is not None else (0.0 if quick else 1.0),
        probe_s=0.0 if quick else 2.0,
        profile=bool(args.profile),
        generator=args.generator,
        wrk_threads=args.wrk_threads,
        cpus=pinning.plan(not args.no_pin),
        peer_python=args.peer_python,
        triton_python=args.triton_python,
        cache_admission=args.cache_admission,
    )
    plan = scenarios.build_plan(
        models=args.models or (("simple",) if quick else scenarios.MODELS),
        caches=args.caches or scenarios.CACHE_MODES,
        sweep=args.sweep if args.sweep is not None else (
            scenarios.QUICK_SWEEP if quick else scenarios.SWEEP
        ),
        peer=args.peer if args.peer is not None else not quick,
        triton=triton,
        grpc=bool(args.grpc),
        floor=bool(args.floor),
        judge=_judged_transports(args, triton),
    )  # fmt: skip
    print(f"cachefleet bench: {len(plan)} scenarios, {options.duration_s:g} s each; "
          f"{options.cpus.description}", flush=True)  # fmt: skip
    try:
        record = harness.run_plan(plan, options, lambda line: print(line, flush=True))
    except BenchError as error:
        print(f"cachefleet bench: {error!s}", file=sys.stderr)
        return 1
    name = args.name or f"{datetime.now(UTC):%Y-%m-%d}-{record.machine}"
    command = "cachefleet bench " + shlex.join(sys.argv[2:] if len(sys.argv) > 1 else [])
    markdown = report.write(record, command, args.output, name)
    print(f"wrote {markdown}")
    page = _docs_page(args)
    if page is not None:
        print(f"wrote {report.write_docs_page(markdown, page)}")
    if chart.available() and record.measurements:
        png = chart.draw(record.measurements, args.output / f"{name}.png", markdown.stem)
        print(f"wrote {png}")
    elif not chart.available():
        print("matplotlib is not installed: no chart (pip install 'cachefleet[bench]')")
    for row in report.floor_rows(record.measurements):
        if row.server.endswith("(HTTP floor)"):
            print(f"{report.FLOOR_TITLE}, {row.throughput:.0f} req/s; {row.model} 100% hits:")
            continue
        print(f"  {row.server} {row.cache}: {row.throughput:.0f} req/s, {row.share:.2f}x the "
              f"floor (by CPU {row.cpu_share:.2f}x)")  # fmt: skip
    judge = report.judge_rows(record.measurements)
    if judge:
        print(f"{report.JUDGE_TITLE}, as shares of Triton's:")
    for line in report.render_judge_rows(judge)[2:]:
        print(f"  {line}")
    for target in targets.check(record.measurements):
        verdict = "n/a" if target.met is None else ("met" if target.met else "MISSED")
        by_cpu = "n/a" if target.met_by_cpu is None else ("met" if target.met_by_cpu else "MISSED")
        print(f"  [{verdict:>6} | by CPU {by_cpu:>6}] {target.target}: {target.measured}")
    return 0 if not record.failures else 2
