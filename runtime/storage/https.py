"""``https://host/path``: one file (an ONNX model, or an archive of a repository, unpacked as it
arrives), through the standard library's client, verifying the server against the system's CAs
and the Secret's ``cabundle.crt``.

Redirects are followed only to other ``https://`` URLs (a download site commonly hands the file
to a CDN): one to ``http://`` would let anyone on the path replace the model, so it fails the
fetch. Nothing secret is sent (the URI may not carry credentials), so another host may answer.
"""

from __future__ import annotations

import shutil
import ssl
import urllib.error
import urllib.request
from pathlib import PurePosixPath

from cachefleet.runtime.config import StorageUri
from cachefleet.runtime.storage.credentials import Credentials
from cachefleet.runtime.storage.errors import FetchError
from cachefleet.runtime.storage.landing import Landing
from cachefleet.runtime.storage.paths import UnsafeKeyError, relative_key
from cachefleet.runtime.storage.redirects import DowngradeError, HttpsOnlyRedirects

TIMEOUT_S = 60.0


def fetch_https(uri: StorageUri, landing: Landing, credentials: Credentials) -> None:
    """Download the file the URI names into ``landing``, under its own name."""
    try:
        name = relative_key(PurePosixPath(uri.path).name, "")
    except UnsafeKeyError as error:
        raise FetchError(uri.text, str(error)) from None
    context = ssl.create_default_context()
    if credentials.ca_bundle is not None:
        context.load_verify_locations(cafile=str(credentials.ca_bundle))
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), HttpsOnlyRedirects()
    )
    try:
        with opener.open(uri.text, timeout=TIMEOUT_S) as response:
            text = response.headers.get("Content-Length")
            declared = int(text) if text is not None and text.isdigit() else None
            if landing.unpacks(name):
                landing.unpack(name, response, declared_bytes=declared)
                return
            if declared is not None:
                landing.expect(declared)
            with landing.create(name) as out:
                shutil.copyfileobj(response, out, length=1 << 20)
    except DowngradeError as error:
        raise FetchError(uri.text, str(error)) from None
    except urllib.error.HTTPError as error:
        raise FetchError(uri.text, f"HTTP {error.code} {error.reason}") from None
    except urllib.error.URLError as error:
        raise FetchError(uri.text, str(error.reason)) from None
    except OSError as error:  # reset, timed out, a TLS failure after the handshake
        raise FetchError(uri.text, str(error)) from None
