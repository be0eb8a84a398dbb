"""`cachefleet demo`: samples, server and load on one machine: no cache vs cache."""

from __future__ import annotations

import argparse

HELP = "samples, server and load on one machine: no cache vs cache."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet demo: not implemented yet")
