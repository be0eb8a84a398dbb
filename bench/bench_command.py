"""`cachefleet bench`: the benchmark harness."""

from __future__ import annotations

import argparse

HELP = "the benchmark harness."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet bench: not implemented yet")
