"""Model files sent in a load request (Triton's ``file:<version>/<name>`` parameters).

Triton loads such a request from an override folder holding only the files sent, with the
request's ``config`` (required) as its configuration. Here the files go into a private
temporary copy of a model folder (mode 0700, files created exclusively and never through a
symlink), each path confined as a configuration's file names are, their total bounded by
``--max-request-size``; the model is loaded from there (sessions, labels and the fingerprint
read every file during the load) and the copy is removed. The route is the model-repository
API's, so ``--http-restricted-api model-repository:...`` guards it like any other load.

Over HTTP a file's content is base64 text, over gRPC a ``bytes_param``. A path with a component
longer than the file system's NAME_MAX is answered as Triton answers it, an internal error
"failed to poll from model repository" (its own example client expects that answer), and the
server goes on.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError, ServingError
from cachefleet.runtime.models.confined import check_name
from cachefleet.runtime.models.errors import ModelLoadError
from cachefleet.runtime.models.model_names import NAME_MAX

PREFIX = "file:"


class RepositoryPollError(ServingError):
    """Triton's answer to a file path the file system cannot hold (500, gRPC INTERNAL)."""

    status_code = 500


def model_files(name: str, parameters: Mapping[str, Any], limit: int) -> dict[str, bytes]:
    """The ``file:`` parameters as ``{relative path: content}``, each path checked.

    Raises BadRequestError (a path out of the folder, content that is not bytes or base64),
    PayloadTooLargeError (more than ``limit`` bytes in all) or RepositoryPollError.
    """
    files: dict[str, bytes] = {}
    total = 0
    for key, value in parameters.items():
        if not key.startswith(PREFIX):
            continue
        path = key[len(PREFIX) :]
        if any(len(part.encode()) > NAME_MAX for part in path.split("/")):
            raise RepositoryPollError(
                f"failed to poll from model repository: a file name in '{key[:64]}...' is "
                f"longer than {NAME_MAX} bytes"
            )
        try:
            check_name(f"parameter '{key}'", path)
        except ModelLoadError as error:
            raise BadRequestError(f"failed to load '{name}': {error}") from None
        content = _content(name, key, value)
        total += len(content)
        if total > limit:
            raise PayloadTooLargeError(
                f"failed to load '{name}': the model files sent are over {limit} bytes "
                "(--max-request-size)"
            )
        files[path] = content
    return files


def _content(name: str, key: str, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            pass
    raise BadRequestError(
        f"failed to load '{name}': parameter '{key}' must hold the file's content "
        "(base64 over HTTP, bytes over gRPC)"
    )


@contextlib.contextmanager
def staged(name: str, files: Mapping[str, bytes]) -> Iterator[Path]:
    """A private temporary model folder named ``name`` holding ``files``; removed after.

    ``name`` and every path must have been checked (``check_model_name``, :func:`model_files`):
    this only writes. A file the others make impossible (``file:1`` beside ``file:1/x``) is a
    400 naming the parameter as the client gave it, never the temporary folder.
    """
    with tempfile.TemporaryDirectory(prefix="cachefleet-load-") as private:
        folder = Path(private) / name
        folder.mkdir(mode=0o700)
        for path, content in files.items():
            try:
                _write(folder / path, content)
            except OSError as error:
                raise BadRequestError(
                    f"failed to load '{name}': cannot write 'file:{path}': {error.strerror}"
                ) from None
        yield folder


def _write(target: Path, content: bytes) -> None:
    """Create ``target`` exclusively (never through a symlink), with its folders."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    with os.fdopen(os.open(target, flags, 0o600), "wb") as handle:
        handle.write(content)
