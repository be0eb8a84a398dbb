"""Storage URIs: the schemes and what each names, and the URIs refused with a reason."""

from __future__ import annotations

import pytest

from cachefleet.runtime.config import StorageUriError, parse_storage_uri


@pytest.mark.parametrize(
    ("text", "scheme", "location", "path", "downloaded"),
    [
        ("s3://models/team/repo/", "s3", "models", "team/repo", True),
        ("s3://models", "s3", "models", "", True),
        ("gs://my.bucket/m", "gs", "my.bucket", "m", True),
        ("https://host:8443/a/simple.onnx?sig=1", "https", "host:8443", "a/simple.onnx", True),
        ("pvc://model-store/teams/a", "pvc", "model-store", "teams/a", False),
    ],
)
def test_what_a_uri_names(
    text: str, scheme: str, location: str, path: str, downloaded: bool
) -> None:
    uri = parse_storage_uri(text)
    assert (uri.scheme, uri.location, uri.path, uri.downloaded) == (
        scheme, location, path, downloaded)  # fmt: skip
    assert str(uri) == text


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("http://host/m.onnx", "the scheme must be one of"),
        ("/models/simple", "the scheme must be one of"),
        ("s3://Upper_Case/m", "is not a bucket name"),
        ("pvc://Claim/x", "is not a PersistentVolumeClaim name"),
        ("https://user:secret@host/m.onnx", "carries credentials"),
        ("s3://bucket/m?versionId=1", "has no query or fragment"),
        ("https://host", "must name a file"),
        ("s3://bucket/a/../b", "'.' or '..' segments"),
        ("pvc://claim/./x", "'.' or '..' segments"),
    ],
)
def test_refused_uris_say_why(text: str, reason: str) -> None:
    with pytest.raises(StorageUriError) as raised:
        parse_storage_uri(text)
    assert reason in str(raised.value)
    assert "secret@" not in str(raised.value)  # a credential in the URI is never echoed
