"""`cachefleet serve`: run the inference server."""

from __future__ import annotations

import argparse

HELP = "run the inference server."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet serve: not implemented yet")
