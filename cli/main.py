"""``cachefleet <command>``: one console script for every part of the product.

Each command lives in the package it belongs to as a ``*_command`` module exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Those modules import their heavy
dependencies inside ``run``, so ``cachefleet --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from types import ModuleType

from cachefleet.bench import bench_command, demo_command
from cachefleet.operator import operator_command, render_command
from cachefleet.runtime import fetch_command, flush_command, samples_command, serve_command

COMMANDS: dict[str, ModuleType] = {
    "serve": serve_command,
    "samples": samples_command,
    "flush": flush_command,
    "fetch-model": fetch_command,
    "render": render_command,
    "operator": operator_command,
    "demo": demo_command,
    "bench": bench_command,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cachefleet",
        description="GPU inference fleets sharing a response cache (KServe v2 / Triton protocol).",
    )
    # The installed distribution's version: the release (CHANGELOG.md's latest entry; the tests
    # keep pyproject.toml, the chart and the CHANGELOG equal).
    parser.add_argument(
        "--version",
        action="version",
        version=f"cachefleet {importlib.metadata.version('cachefleet')}",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        # Bare ``cachefleet``: the list of commands, and argparse's usage-error status.
        parser.print_help(sys.stderr)
        return 2
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
