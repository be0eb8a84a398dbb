"""`cachefleet render`: print every object the operator would apply for a CachedInferenceService."""

from __future__ import annotations

import argparse

HELP = "print every object the operator would apply for a CachedInferenceService."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    return None


def run(args: argparse.Namespace) -> int:
    raise SystemExit("cachefleet render: not implemented yet")
