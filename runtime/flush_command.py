"""`cachefleet flush`: remove one model's entries from the response cache."""

from __future__ import annotations

import argparse

HELP = "remove one model's entries from the response cache."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet flush: not implemented yet")
