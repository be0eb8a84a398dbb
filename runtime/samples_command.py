"""`cachefleet samples`: write the sample model repository."""

from __future__ import annotations

import argparse

HELP = "write the sample model repository."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet samples: not implemented yet")
