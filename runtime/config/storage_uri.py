"""Where a model's repository is stored: ``spec.model.storageUri`` and ``cachefleet fetch-model``.

Both sides read the same URI: the operator decides from it whether to mount a claim (``pvc://``)
or to render the init container that downloads it, and that container parses it again to fetch.
One parser here keeps the two from disagreeing about what a URI means.

Schemes (as KServe's ``storageUri``): ``s3://bucket/prefix`` (AWS S3 and S3-compatible stores),
``gs://bucket/prefix``, ``https://host/path`` (one file: an ONNX model or an archive) and
``pvc://claim/path`` (a PersistentVolumeClaim, mounted read-only instead of downloaded).
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Literal

Scheme = Literal["s3", "gs", "https", "pvc"]
SCHEMES: tuple[Scheme, ...] = ("s3", "gs", "https", "pvc")
#: The CRD's pattern for spec.model.storageUri (the same check, before any of this runs).
URI_PATTERN = r"^(s3|gs|https|pvc)://[^/?#]+(/.*)?$"
#: S3 and GCS bucket names (the stricter of the two rule sets is not needed: the store refuses
#: what it does not hold); a claim name is a DNS-1123 subdomain.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_CLAIM = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


class StorageUriError(ValueError):
    """A storage URI that names no place a model can be fetched from."""


@dataclass(frozen=True)
class StorageUri:
    """A parsed storage URI: ``location`` is the bucket, host or claim; ``path`` the object key
    prefix, URL path or folder inside the claim, without leading or trailing slashes."""

    scheme: Scheme
    location: str
    path: str
    text: str

    @property
    def downloaded(self) -> bool:
        """Fetched by an init container; False for a claim, which is mounted instead."""
        return self.scheme != "pvc"

    def __str__(self) -> str:
        return self.text


def parse_storage_uri(text: str) -> StorageUri:
    """Parse ``text`` or raise StorageUriError saying what is wrong with it."""
    parts = urllib.parse.urlsplit(text)
    scheme = next((s for s in SCHEMES if s == parts.scheme.lower()), None)
    if scheme is None:
        allowed = ", ".join(f"{s}://" for s in SCHEMES)
        raise StorageUriError(f"{text!r}: the scheme must be one of {allowed}")
    if parts.username is not None or parts.password is not None:
        # It would sit in the object and in the pod template for anyone to read.
        raise StorageUriError(
            f"{scheme}:// URI carries credentials: put them in the Secret named by "
            "storageSecretName"
        )
    location = parts.netloc
    path = parts.path.strip("/")
    if scheme in ("s3", "gs") and _BUCKET.fullmatch(location) is None:
        raise StorageUriError(f"{text!r}: {location!r} is not a bucket name")
    if scheme == "pvc" and _CLAIM.fullmatch(location) is None:
        raise StorageUriError(f"{text!r}: {location!r} is not a PersistentVolumeClaim name")
    if scheme != "https" and (parts.query or parts.fragment):
        raise StorageUriError(f"{text!r}: a {scheme}:// URI has no query or fragment")
    if scheme == "https" and not path:
        raise StorageUriError(f"{text!r}: an https:// URI must name a file")
    if any(part in (".", "..") for part in path.split("/")):
        raise StorageUriError(f"{text!r}: the path must not contain '.' or '..' segments")
    return StorageUri(scheme=scheme, location=location, path=path, text=text)
