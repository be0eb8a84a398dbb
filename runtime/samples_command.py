"""`cachefleet samples DIR`: write the sample model repository."""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = (
    "write the sample model repository (simple, simple_string, simple_int8, simple_identity, "
    "densenet_onnx, densenet_batch), "
    "built locally with onnx."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory", metavar="DIR", type=Path, help="repository to write into")
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="NAME",
        help="write only this sample (repeatable); default: all",
    )


def run(args: argparse.Namespace) -> int:
    from cachefleet.runtime.samples.repository import write_samples

    try:
        folders = write_samples(args.directory, tuple(args.models) if args.models else None)
    except KeyError as error:
        raise SystemExit(f"cachefleet samples: {error.args[0]}") from None
    for folder in folders:
        print(f"wrote {folder}")
    return 0
