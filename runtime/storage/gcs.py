"""``gs://bucket/prefix``: every object below the prefix (or the one object it names), through
google-cloud-storage (its retries and checksummed downloads). Its HTTP session (requests) would
follow a redirect from https to http: a response hook refuses that (``redirects``); requests
itself drops the Authorization header on a redirect to another host."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cachefleet.runtime.config import StorageUri
from cachefleet.runtime.storage.budget import SizeLimitError, WriteBudget
from cachefleet.runtime.storage.credentials import Credentials
from cachefleet.runtime.storage.errors import FetchError
from cachefleet.runtime.storage.paths import UnsafeKeyError, inside, relative_key
from cachefleet.runtime.storage.redirects import DowngradeError, refuse_downgrade_hook


def fetch_gcs(
    uri: StorageUri, destination: Path, credentials: Credentials, budget: WriteBudget
) -> list[Path]:
    """Download into ``destination``; the files written, or FetchError. Each object's listed
    size must fit ``budget`` before it is downloaded; the bytes written are charged to it."""
    import google.api_core.exceptions
    import google.auth.exceptions

    folder = f"{uri.path}/" if uri.path else ""
    try:
        client = _client(credentials)
        written = []
        for blob in client.list_blobs(uri.location, prefix=uri.path or None):
            name = str(blob.name)
            if name == uri.path:
                relative = relative_key(name.rsplit("/", 1)[-1], "")
            elif name.startswith(folder) and not name.endswith("/"):
                relative = relative_key(name, folder)
            else:
                continue
            target = inside(destination, relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            budget.expect(int(blob.size or 0))
            with budget.create(target) as out:
                blob.download_to_file(out)
            written.append(target)
    except (UnsafeKeyError, SizeLimitError, DowngradeError) as error:
        raise FetchError(uri.text, str(error)) from None
    except google.api_core.exceptions.GoogleAPIError as error:
        raise FetchError(uri.text, _api_error(error)) from None
    except (google.auth.exceptions.GoogleAuthError, ValueError) as error:  # a bad key file
        raise FetchError(uri.text, f"credentials: {error}") from None
    if not written:
        raise FetchError(uri.text, f"no object in bucket {uri.location} under {uri.path!r}")
    return written


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
