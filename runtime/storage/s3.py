"""``s3://bucket/prefix``: every object below the prefix (or the one object it names), through
boto3's managed transfers (multipart, retries), from AWS S3 or an S3-compatible endpoint. The one
archive a URI names is read as one stream (``GetObject``, botocore's retries of the request) and
unpacked as it arrives, so it never sits in the model volume."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing
from typing import Any

from cachefleet.runtime.config import StorageUri
from cachefleet.runtime.storage.credentials import Credentials
from cachefleet.runtime.storage.errors import FetchError
from cachefleet.runtime.storage.landing import Landing
from cachefleet.runtime.storage.paths import UnsafeKeyError, relative_key


def fetch_s3(uri: StorageUri, landing: Landing, credentials: Credentials) -> None:
    """Download into ``landing``, or FetchError. The listed sizes must fit its budget before
    any download starts; the bytes written are charged to it."""
    import botocore.exceptions

    client = _client(credentials)
    try:
        keys = list(_keys(client, uri))
        if not keys:
            raise FetchError(uri.text, f"no object in bucket {uri.location} under {uri.path!r}")
        named = keys[0] if len(keys) == 1 and keys[0][0] == uri.path else None
        if named is not None and landing.unpacks(named[1]):
            key, relative, size = named
            body = client.get_object(Bucket=uri.location, Key=key)["Body"]
            with closing(body):
                landing.unpack(relative, body, declared_bytes=size)
            return
        landing.expect(sum(size for _, _, size in keys))
        for key, relative, _ in keys:
            with landing.create(relative) as out:
                client.download_fileobj(uri.location, key, out)
    except UnsafeKeyError as error:
        raise FetchError(uri.text, str(error)) from None
    except botocore.exceptions.ClientError as error:
        raise FetchError(uri.text, _client_error(error)) from None
    except botocore.exceptions.BotoCoreError as error:  # no credentials, endpoint unreachable
        raise FetchError(uri.text, str(error)) from None


def _keys(client: Any, uri: StorageUri) -> Iterator[tuple[str, Any, int]]:
    """(key, relative path, listed size) of each object: the one the path names exactly, else
    those below it as a folder (``models/a`` never matches ``models/ab/...``)."""
    folder = f"{uri.path}/" if uri.path else ""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=uri.location, Prefix=uri.path)
    for page in pages:
        for item in page.get("Contents") or []:
            key, size = str(item["Key"]), int(item.get("Size") or 0)
            if key == uri.path:
                yield key, relative_key(key.rsplit("/", 1)[-1], ""), size
            elif key.startswith(folder) and not key.endswith("/"):  # "/": a folder marker
                yield key, relative_key(key, folder), size


def _client(credentials: Credentials) -> Any:
    import boto3
    import botocore.config

    use_https = credentials.flag("S3_USE_HTTPS", default=True)
    endpoint = credentials.get("AWS_ENDPOINT_URL", "S3_ENDPOINT")
    if endpoint is not None and "://" not in endpoint:  # KServe's S3_ENDPOINT: host[:port]
        endpoint = f"{'https' if use_https else 'http'}://{endpoint}"
    verify: bool | str = credentials.flag("S3_VERIFY_SSL", default=True)
    if verify and credentials.ca_bundle is not None:
        verify = str(credentials.ca_bundle)
    session = boto3.session.Session(
        aws_access_key_id=credentials.get("AWS_ACCESS_KEY_ID"),
        aws_secret_access_key=credentials.get("AWS_SECRET_ACCESS_KEY"),
        aws_session_token=credentials.get("AWS_SESSION_TOKEN"),
        region_name=credentials.get("AWS_DEFAULT_REGION", "AWS_REGION"),
    )
    config = botocore.config.Config(retries={"mode": "standard", "max_attempts": 5})
    return session.client(
        "s3", endpoint_url=endpoint, use_ssl=use_https, verify=verify, config=config
    )


def _client_error(error: Any) -> str:
    """``AccessDenied: Access Denied (ListObjectsV2)``: the store's code and message."""
    details = error.response.get("Error") or {}
    code = details.get("Code") or "Error"
    message = details.get("Message") or str(error)
    return f"{code}: {message} ({error.operation_name})"
