"""Fetch a model repository: choose the store, download into a staging folder beside the
target (through a :class:`Landing`, which unpacks the one archive a URI names without keeping it
beside its tree), arrange it (``layout``), then move it into place.

Every byte written into the staging folder, downloaded or unpacked, is charged to one
:class:`WriteBudget`: past it the fetch fails and the staging folder is removed. So does an
archive member refused as it streams: whatever its archive unpacked before it goes with the
staging folder, and a refused archive leaves nothing in the repository.

Staging in the target's own volume means a download that fails half-way leaves the repository as
it was, and a re-run (the kubelet restarts a failed init container) starts afresh: nothing is
resumed by hand; the stores' clients retry what they can.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from cachefleet.runtime.config import StorageUri, StorageUriError, parse_storage_uri
from cachefleet.runtime.storage.budget import WriteBudget
from cachefleet.runtime.storage.credentials import Credentials
from cachefleet.runtime.storage.errors import FetchError
from cachefleet.runtime.storage.landing import Landing
from cachefleet.runtime.storage.layout import LayoutError, arrange, move_into
from cachefleet.runtime.storage.paths import UnsafeKeyError

Fetcher = Callable[[StorageUri, Landing, Credentials], None]
STAGING = ".cachefleet-fetching"


def fetch_model(
    uri_text: str,
    destination: Path,
    *,
    model_name: str,
    credentials: Credentials,
    max_bytes: int,
    scratch: Path | None = None,
) -> Path:
    """Download ``uri_text`` into the repository ``destination``, writing at most ``max_bytes``
    there (downloaded files and unpacked archives together); the model's folder there. A zip the
    URI names waits in ``scratch`` while it is unpacked (None: in ``destination``, counted)."""
    try:
        uri = parse_storage_uri(uri_text)
    except StorageUriError as error:
        raise FetchError(uri_text, str(error)) from None
    if not uri.downloaded:
        raise FetchError(uri_text, "a pvc:// URI is mounted, not fetched")
    destination.mkdir(parents=True, exist_ok=True)
    staging = destination / STAGING
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        landing = Landing(staging, WriteBudget(max_bytes), scratch=scratch)
        _fetcher(uri)(uri, landing, credentials)
        arrange(staging, model_name)
        move_into(staging, destination)
    except (LayoutError, UnsafeKeyError, ValueError) as error:
        raise FetchError(uri_text, str(error)) from None
    except OSError as error:  # the volume full, a file that cannot be written
        raise FetchError(uri_text, f"writing {destination}: {error}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination / model_name


def _fetcher(uri: StorageUri) -> Fetcher:
    """The store's module, imported only when asked for (each pulls in its own client)."""
    if uri.scheme == "s3":
        from cachefleet.runtime.storage.s3 import fetch_s3

        return fetch_s3
    if uri.scheme == "gs":
        from cachefleet.runtime.storage.gcs import fetch_gcs

        return fetch_gcs
    from cachefleet.runtime.storage.https import fetch_https

    return fetch_https
