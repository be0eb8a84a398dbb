"""``cachefleet <command>``: one console script for every part of the product.

Each command lives in the package it belongs to as a ``*_command`` module exposing ``HELP``,
``add_arguments(parser)`` and ``run(args) -> int``. Those modules import their heavy
dependencies inside ``run``, and a run imports only its own command's module and builds only its
flags: a process of the test suite, a pod's start, ``cachefleet flush`` in a script, each paid
for every command's imports (serve's settings, render's YAML, the installed version) before.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: Each command's module, imported when the command runs (or for the list of commands).
COMMANDS: dict[str, str] = {
    "serve": "cachefleet.runtime.serve_command",
    "samples": "cachefleet.runtime.samples_command",
    "flush": "cachefleet.runtime.flush_command",
    "fetch-model": "cachefleet.runtime.fetch_command",
    "render": "cachefleet.operator.render_command",
    "operator": "cachefleet.operator.operator_command",
    "demo": "cachefleet.bench.demo_command",
    "bench": "cachefleet.bench.bench_command",
}


class _VersionAction(argparse.Action):
    """``--version``: the installed distribution's version, read only when asked for (the
    release, CHANGELOG.md's latest entry; the tests keep pyproject.toml, the chart and the
    CHANGELOG equal)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show the version and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        import importlib.metadata

        print(f"cachefleet {importlib.metadata.version('cachefleet')}")  # stdout, as argparse's
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or with ``command`` only that command's flags (the others
    listed by name and help, and their modules imported only for that list)."""
    parser = argparse.ArgumentParser(
        prog="cachefleet",
        description="GPU inference fleets sharing a response cache (KServe v2 / Triton protocol).",
    )
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    if command in COMMANDS:
        module = importlib.import_module(COMMANDS[command])
        _add_command(subparsers, command, module)
        return parser
    for name, path in COMMANDS.items():
        _add_command(subparsers, name, importlib.import_module(path))
    return parser


def _add_command(subparsers: Any, name: str, module: ModuleType) -> None:
    sub = subparsers.add_parser(name, help=module.HELP, description=module.HELP)
    module.add_arguments(sub)
    sub.set_defaults(run=module.run, command_parser=sub)


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments[0] if arguments else None)
    if not arguments:
        # Bare ``cachefleet``: the list of commands, and argparse's usage-error status.
        parser.print_help(sys.stderr)
        return 2
    args, unknown = parser.parse_known_args(arguments)
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
