"""`cachefleet fetch-model URI DIR`: download a model repository from object storage or a web
server into DIR, the runtime's model repository (the init container of a service whose
``spec.model.storageUri`` is not a claim).

At most ``--max-bytes`` are written (downloads and unpacked archives counted as written, not as
a server or an archive declares them); past it the fetch fails and leaves nothing behind. The
operator passes the service's ``spec.model.storageSizeLimit`` (the model volume's own limit) as
``CACHEFLEET_MAX_BYTES``, which the option reads as its default, as every flag of ``serve`` does.
A tar archive is unpacked as it streams and never written, so the bound is the tree's; a zip is
downloaded whole first, into ``--scratch-dir`` when given (the operator mounts a scratch emptyDir
for a URI naming a ``.zip`` and passes it as ``CACHEFLEET_SCRATCH_DIR``), else beside its tree.

A failure is one line naming the URI and the reason, on stderr and in the termination message
file when one is given (Kubernetes shows it in ``kubectl describe pod`` and the operator copies it
into the service's status), with exit status 1.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from pathlib import Path

HELP = (
    "download a model repository (s3://, gs://, https://) into DIR, the layout `serve` reads; "
    "credentials as KServe's storage initializer names them."
)


DEFAULT_MAX_BYTES = "10Gi"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "uri", metavar="URI", help="s3://bucket/prefix, gs://bucket/prefix or https://host/file"
    )
    parser.add_argument(
        "directory", metavar="DIR", type=Path, help="model repository to write into"
    )
    parser.add_argument(
        "--model-name",
        required=True,
        help="the model's name: a single model folder or .onnx file is placed under it, and a "
        "repository must hold it",
    )
    parser.add_argument(
        "--secret-dir",
        type=Path,
        default=None,
        help="a mounted Secret's folder holding the credentials (one file per key); "
        "default: read the same names from the environment",
    )
    parser.add_argument(
        "--max-bytes",
        type=_size,
        # A string default goes through `type` too.
        default=os.environ.get("CACHEFLEET_MAX_BYTES", DEFAULT_MAX_BYTES),
        metavar="SIZE",
        help="the most the fetch may write into DIR, downloads and unpacked archives together "
        "(a tar the URI names is unpacked as it streams: only its files count) (e.g. 512Mi, "
        f"20Gi); past it the fetch fails and keeps nothing (default {DEFAULT_MAX_BYTES}; env "
        "CACHEFLEET_MAX_BYTES)",
    )
    parser.add_argument(
        "--scratch-dir",
        type=Path,
        # Read from the environment for the same reason as --max-bytes (skew).
        default=os.environ.get("CACHEFLEET_SCRATCH_DIR") or None,
        metavar="DIR",
        help="where a .zip the URI names waits while it is unpacked, bounded by --max-bytes "
        "of its own (a tar is unpacked as it streams); default: in DIR, where the zip and its "
        "files both count against --max-bytes (env CACHEFLEET_SCRATCH_DIR)",
    )
    parser.add_argument(
        "--termination-message-file",
        type=Path,
        default=None,
        help="also write a failure's message here (a pod's /dev/termination-log)",
    )


def run(args: argparse.Namespace) -> int:
    from cachefleet.runtime.storage.credentials import read_credentials
    from cachefleet.runtime.storage.errors import FetchError
    from cachefleet.runtime.storage.fetch import fetch_model

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        credentials = read_credentials(args.secret_dir, os.environ)
        folder = fetch_model(
            args.uri,
            args.directory,
            model_name=args.model_name,
            credentials=credentials,
            max_bytes=args.max_bytes,
            scratch=args.scratch_dir,
        )
    except FetchError as error:
        _report(str(error), args.termination_message_file)
        return 1
    except OSError as error:  # the Secret's folder unreadable
        _report(f"cannot fetch {args.uri}: {error}", args.termination_message_file)
        return 1
    except Exception as error:  # a client's failure not translated in its module: still one line
        reason = f"{type(error).__name__}: {error}"
        _report(f"cannot fetch {args.uri}: {reason}", args.termination_message_file)
        return 1
    print(f"fetched {args.uri} into {folder}")
    return 0


def _size(text: str) -> int:
    """A size as the spec writes it (``20Gi``, ``500M``, ``1e9``), in bytes."""
    from cachefleet.runtime.config.quantity import QuantityError, parse_bytes

    try:
        count = parse_bytes(text)
    except QuantityError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if count <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the limit must be more than 0 bytes")
    return count


def _report(message: str, termination_file: Path | None) -> None:
    print(message, file=sys.stderr)
    if termination_file is not None:
        # Unwritable: stderr still has it (FallbackToLogsOnError shows the log's tail).
        with contextlib.suppress(OSError):
            termination_file.write_text(message + "\n")
