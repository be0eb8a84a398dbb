"""`cachefleet operator`: run the operator (extra arguments go to kopf run)."""

from __future__ import annotations

import argparse

HELP = "run the operator (extra arguments go to kopf run)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet operator: not implemented yet")
