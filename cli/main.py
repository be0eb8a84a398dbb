"""``cachefleet <command>``: one console script for every part of the product.

Each command lives in the package it belongs to as a ``*_command`` module exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Those modules import their heavy
dependencies inside ``run``, so ``cachefleet --help`` stays fast.
"""

from __future__ import annotations

import argparse
import difflib
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
        sub.set_defaults(run=module.run, command_parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        # Bare ``cachefleet``: the list of commands, and argparse's usage-error status.
        parser.print_help(sys.stderr)
        return 2
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # Refused by the command's own parser, so its usage is shown (not the top level's),
        # with the nearest flag it knows (argparse suggests only from Python 3.14 on).
        command: argparse.ArgumentParser = args.command_parser
        command.error(unrecognized(command, unknown))
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130


def unrecognized(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """argparse's complaint about ``unknown`` arguments, and "did you mean --X?" for the first
    flag among them that is near one of ``parser``'s."""
    message = f"unrecognized arguments: {' '.join(unknown)}"
    known = [option for action in parser._actions for option in action.option_strings]
    for argument in unknown:
        if argument.startswith("--"):
            near = difflib.get_close_matches(argument.split("=", 1)[0], known, n=1, cutoff=0.6)
            if near:
                return f"{message} (did you mean {near[0]}?)"
    return message


if __name__ == "__main__":
    sys.exit(main())
