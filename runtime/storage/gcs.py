"""``gs://bucket/prefix``: every object below the prefix (or the one object it names), through
google-cloud-storage (its retries and checksummed downloads). Its HTTP session (requests) would
follow a redirect from https to http: a response hook refuses that (``redirects``); requests
itself drops the Authorization header on a redirect to another host. The one archive a URI
names is read through the client's blob reader (ranged reads, each retried) and unpacked as it
arrives, so it never sits in the model volume."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from cachefleet.runtime.config import StorageUri
from cachefleet.runtime.storage.budget import SizeLimitError
from cachefleet.runtime.storage.credentials import Credentials
from cachefleet.runtime.storage.errors import FetchError
from cachefleet.runtime.storage.landing import Landing
from cachefleet.runtime.storage.paths import UnsafeKeyError, relative_key
from cachefleet.runtime.storage.redirects import DowngradeError, refuse_downgrade_hook


def fetch_gcs(uri: StorageUri, landing: Landing, credentials: Credentials) -> None:
    """Download into ``landing``, or FetchError. Each object's listed size must fit its budget
    before it is downloaded; the bytes written are charged to it."""
    import google.api_core.exceptions
    import google.auth.exceptions

    try:
        client = _client(credentials)
    except (google.auth.exceptions.GoogleAuthError, ValueError) as error:  # a bad key file
        raise FetchError(uri.text, f"credentials: {error}") from None
    try:
        blobs = list(_blobs(client, uri))
        if not blobs:
            raise FetchError(uri.text, f"no object in bucket {uri.location} under {uri.path!r}")
        if len(blobs) == 1 and blobs[0][0].name == uri.path and landing.unpacks(blobs[0][1]):
            blob, relative = blobs[0]
            with blob.open("rb") as reader:
                landing.unpack(relative, reader, declared_bytes=int(blob.size or 0))
            return
        for blob, relative in blobs:
            landing.expect(int(blob.size or 0))
            with landing.create(relative) as out:
                blob.download_to_file(out)
    except (UnsafeKeyError, SizeLimitError, DowngradeError) as error:
        raise FetchError(uri.text, str(error)) from None
    except google.api_core.exceptions.GoogleAPIError as error:
        raise FetchError(uri.text, _api_error(error)) from None
    except google.auth.exceptions.GoogleAuthError as error:
        raise FetchError(uri.text, f"credentials: {error}") from None


def _blobs(client: Any, uri: StorageUri) -> Iterator[tuple[Any, PurePosixPath]]:
    """(blob, relative path) of each object: the one the path names exactly, else those below
    it as a folder."""
    folder = f"{uri.path}/" if uri.path else ""
    for blob in client.list_blobs(uri.location, prefix=uri.path or None):
        name = str(blob.name)
        if name == uri.path:
            yield blob, relative_key(name.rsplit("/", 1)[-1], "")
        elif name.startswith(folder) and not name.endswith("/"):
            yield blob, relative_key(name, folder)


def _client(credentials: Credentials) -> Any:
    """From the Secret's service-account key; without one, the environment's credentials
    (GOOGLE_APPLICATION_CREDENTIALS, workload identity), else anonymous (a public bucket)."""
    import google.auth.exceptions
    from google.cloud import storage

    if credentials.gcs_key_file is not None:
        client = storage.Client.from_service_account_json(str(credentials.gcs_key_file))
    else:
        try:
            client = storage.Client()
        except google.auth.exceptions.DefaultCredentialsError:
            client = storage.Client.create_anonymous_client()
    # The client's session (a requests.Session) is its only way out: the documented hook list.
    client._http.hooks["response"].append(refuse_downgrade_hook)
    return client


def _api_error(error: Any) -> str:
    code = getattr(error, "code", None)
    message = getattr(error, "message", None) or str(error)
    return f"{code}: {message}" if code else str(message)
