"""`cachefleet fetch-model`: a model repository from a real S3 API server (moto), a GCS emulator
and a local HTTPS server, into the layout `cachefleet serve` reads; and each failure a user meets
(bad credentials, nothing at the URI, an untrusted server, keys that climb out of the folder) as
one line naming the URI and the reason, exit status 1, and the termination message written.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.certificates import make_authority
from support.object_stores import GcsEmulator, MotoS3, TlsFileServer
from support.processes import CACHEFLEET, ServerProcess, fetch_model, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]  # about 100 s on one core

BUCKET = "models"
#: Only the variables these tests mean: none of the machine's AWS or Google settings leak in.
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "STORAGE_"))
}


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository holding the `simple` sample only."""
    path = tmp_path_factory.mktemp("samples") / "repo"
    subprocess.run([*CACHEFLEET, "samples", str(path), "--model", "simple"], check=True)
    return path


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory, samples: Path) -> Iterator[MotoS3]:
    store = MotoS3(tmp_path_factory.mktemp("moto"))
    try:
        client = store.client()
        client.create_bucket(Bucket=BUCKET)
        store.upload_tree(BUCKET, "team/repository", samples)  # a Triton-layout repository
        store.upload_tree(BUCKET, "team/one-model", samples / "simple")  # one model's folder
        client.put_object(Bucket=BUCKET, Key="team/repository-extra", Body=b"not below it")
        bundle = io.BytesIO()
        with tarfile.open(fileobj=bundle, mode="w:gz") as tar:
            tar.add(samples / "simple", arcname="simple")
        client.put_object(Bucket=BUCKET, Key="team/bundle.tar.gz", Body=bundle.getvalue())
        store.upload_tree(BUCKET, "team/with-zip", samples)
        client.put_object(Bucket=BUCKET, Key="team/with-zip/simple/labels.zip", Body=b"PK")
        for key in ("climb/simple/config.pbtxt", "climb/../../outside.txt"):
            client.put_object(Bucket=BUCKET, Key=key, Body=b"x")
        yield store
    finally:
        store.stop()


def s3_env(store: MotoS3, *, secret: str | None = None) -> dict[str, str]:
    return {**CLEAN_ENV, "AWS_ACCESS_KEY_ID": store.key.id,
            "AWS_SECRET_ACCESS_KEY": secret or store.key.secret,
            "AWS_ENDPOINT_URL": store.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


SIMPLE_FILES = {"simple/config.pbtxt", "simple/1/model.onnx"}


def test_a_repository_from_s3_is_served_and_answers(s3: MotoS3, tmp_path: Path) -> None:
    repository = tmp_path / "models"
    result = fetch_model(f"s3://{BUCKET}/team/repository", repository, s3_env(s3))
    assert result.returncode == 0, result.stderr
    assert files_under(repository) == SIMPLE_FILES  # not repository-extra, a sibling key
    server = ServerProcess(["--model-repository", str(repository)], tmp_path)
    server.start()
    try:
        body = {"inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ]}  # fmt: skip
        request = urllib.request.Request(
            f"{server.base_url}/v2/models/simple/infer",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            outputs = {o["name"]: o["data"] for o in json.load(response)["outputs"]}
    finally:
        server.stop()
    assert outputs["OUTPUT0"] == [i + 1 for i in range(16)]
    assert outputs["OUTPUT1"] == [i - 1 for i in range(16)]


def test_a_single_model_folder_goes_under_the_model_name(s3: MotoS3, tmp_path: Path) -> None:
    result = fetch_model(f"s3://{BUCKET}/team/one-model/", tmp_path / "m", s3_env(s3))
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "m") == SIMPLE_FILES


def test_one_archive_is_unpacked_and_archives_in_a_folder_are_kept(
    s3: MotoS3, tmp_path: Path
) -> None:
    result = fetch_model(f"s3://{BUCKET}/team/bundle.tar.gz", tmp_path / "a", s3_env(s3))
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "a") == SIMPLE_FILES
    result = fetch_model(f"s3://{BUCKET}/team/with-zip", tmp_path / "b", s3_env(s3))
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "b") == {*SIMPLE_FILES, "simple/labels.zip"}


def test_credentials_come_from_a_mounted_secret_folder(s3: MotoS3, tmp_path: Path) -> None:
    """As in a pod: one file per key, KServe's names, nothing in the environment."""
    secret = tmp_path / "secret"
    secret.mkdir()
    for key, value in s3_env(s3).items():
        if key.startswith("AWS_"):
            (secret / key).write_text(value)
    result = fetch_model(f"s3://{BUCKET}/team/repository", tmp_path / "m", CLEAN_ENV,
                   "--secret-dir", str(secret))  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "m") == SIMPLE_FILES


@pytest.mark.parametrize(
    ("uri", "secret", "reason"),
    [
        (f"s3://{BUCKET}/team/repository", "wrong-secret", "SignatureDoesNotMatch"),
        (f"s3://{BUCKET}/team/nothing-here", None, "no object in bucket models under"),
        ("s3://no-such-bucket/models", None, "NoSuchBucket"),
        (f"s3://{BUCKET}/climb", None, "does not name a file inside the prefix"),
        ("s3://Bad_Bucket/x", None, "is not a bucket name"),
    ],
    ids=["bad-credentials", "missing-prefix", "missing-bucket", "dot-dot-key", "bad-uri"],
)
def test_s3_failures_are_one_line_with_the_uri_and_the_reason(
    s3: MotoS3, tmp_path: Path, uri: str, secret: str | None, reason: str
) -> None:
    message_file = tmp_path / "termination-log"
    target = tmp_path / "deep" / "models"
    result = fetch_model(uri, target, s3_env(s3, secret=secret),
                   "--termination-message-file", str(message_file))  # fmt: skip
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"cannot fetch {uri}: ")
    assert reason in line
    assert s3.key.secret not in line
    assert message_file.read_text().strip() == line
    assert not (tmp_path / "deep" / "outside.txt").exists()
    assert files_under(tmp_path) == {"termination-log"}  # nothing left behind


def test_an_unreachable_endpoint_is_one_line(s3: MotoS3, tmp_path: Path) -> None:
    env = {**s3_env(s3), "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"}
    result = fetch_model(f"s3://{BUCKET}/team/repository", tmp_path / "m", env)
    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"cannot fetch s3://{BUCKET}/team/repository: Could not connect")


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory, samples: Path) -> Iterator[TlsFileServer]:
    """The sample as a bare .onnx file, a .tar.gz of the repository, a .zip of the model folder,
    and a tarball whose member climbs out; served over TLS by a certificate of a test CA."""
    root = tmp_path_factory.mktemp("web")
    authority = make_authority(root / "pki", "storage-ca")
    site = root / "site"
    site.mkdir()
    (site / "simple.onnx").write_bytes((samples / "simple" / "1" / "model.onnx").read_bytes())
    with tarfile.open(site / "repository.tar.gz", "w:gz") as tar:
        tar.add(samples / "simple", arcname="simple")
    with zipfile.ZipFile(site / "model.zip", "w") as bundle:
        for path in (samples / "simple").rglob("*"):
            if path.is_file():
                bundle.write(path, str(path.relative_to(samples / "simple")))
    with tarfile.open(site / "climb.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    server = TlsFileServer(site, authority.issue(root / "pki", "web"), ca=authority.cert)
    yield server
    server.stop()


def web_env(web: TlsFileServer) -> dict[str, str]:
    """The test CA to trust, as a pod's Secret key cabundle.crt gives it."""
    return {**CLEAN_ENV, "AWS_CA_BUNDLE": str(web.ca)}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("simple.onnx", {"simple/1/model.onnx"}),
        ("repository.tar.gz", SIMPLE_FILES),
        ("model.zip", SIMPLE_FILES),
    ],
)
def test_https_files_and_archives_become_the_repository(
    web: TlsFileServer, tmp_path: Path, name: str, expected: set[str]
) -> None:
    result = fetch_model(web.url(name), tmp_path / "m", web_env(web))
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "m") == expected


def test_https_failures_name_the_uri_and_the_reason(web: TlsFileServer, tmp_path: Path) -> None:
    missing = fetch_model(web.url("nothing.onnx"), tmp_path / "a", web_env(web))
    assert missing.returncode == 1
    assert (
        missing.stderr.strip() == f"cannot fetch {web.url('nothing.onnx')}: HTTP 404 File not found"
    )
    untrusted = fetch_model(web.url("simple.onnx"), tmp_path / "b", CLEAN_ENV)
    assert untrusted.returncode == 1
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
    climbing = fetch_model(web.url("climb.tar.gz"), tmp_path / "c", web_env(web))
    assert climbing.returncode == 1
    assert "archive member refused" in climbing.stderr
    assert not (tmp_path / "outside.txt").exists()


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory, samples: Path) -> Iterator[GcsEmulator]:
    from google.cloud import storage

    emulator = GcsEmulator(tmp_path_factory.mktemp("gcs"))
    previous = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = emulator.endpoint
    try:
        bucket = storage.Client.create_anonymous_client().create_bucket(BUCKET)
        for path in (p for p in samples.rglob("*") if p.is_file()):
            bucket.blob(f"repo/{path.relative_to(samples)}").upload_from_filename(str(path))
        bundle = io.BytesIO()
        with tarfile.open(fileobj=bundle, mode="w:gz") as tar:
            tar.add(samples / "simple", arcname="simple")
        bucket.blob("bundle.tar.gz").upload_from_string(bundle.getvalue())
        yield emulator
    finally:
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = previous
        emulator.stop()


def test_a_repository_from_gcs(gcs: GcsEmulator, tmp_path: Path) -> None:
    env = {**CLEAN_ENV, "STORAGE_EMULATOR_HOST": gcs.endpoint}
    result = fetch_model(f"gs://{BUCKET}/repo", tmp_path / "m", env)
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "m") == SIMPLE_FILES
    missing = fetch_model(f"gs://{BUCKET}/elsewhere", tmp_path / "n", env)
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"cannot fetch gs://{BUCKET}/elsewhere: no object in bucket models under 'elsewhere'"
    )


def test_an_archive_from_gcs_is_unpacked_as_it_streams(gcs: GcsEmulator, tmp_path: Path) -> None:
    """Read through the client's blob reader (ranged reads), never written whole."""
    env = {**CLEAN_ENV, "STORAGE_EMULATOR_HOST": gcs.endpoint}
    result = fetch_model(f"gs://{BUCKET}/bundle.tar.gz", tmp_path / "m", env)
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "m") == SIMPLE_FILES


def test_a_broken_service_account_key_is_a_credentials_failure(
    gcs: GcsEmulator, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "gcloud-application-credentials.json").write_text('{"type": "service_account"}')
    env = {**CLEAN_ENV, "STORAGE_EMULATOR_HOST": gcs.endpoint}
    result = fetch_model(f"gs://{BUCKET}/repo", tmp_path / "m", env, "--secret-dir", str(secret))
    assert result.returncode == 1
    assert result.stderr.startswith(f"cannot fetch gs://{BUCKET}/repo: credentials: ")
