"""`cachefleet fetch-model` against a hostile https server on loopback: archives that escape the
target (the CVE-2025-4517 symlink chain, which Python 3.11.7's own data filter lets through),
archives and files that grow past ``--max-bytes``, and redirects from https to plain http (also
through the GCS client). Each is one line naming the URI and the reason, exit status 1, nothing
written outside the target and nothing left in it.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.certificates import Authority, make_authority
from support.object_stores import RecordingServer, TlsFileServer
from support.processes import fetch_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

MiB = 1 << 20
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "STORAGE_"))
}


@dataclass(frozen=True)
class Web:
    server: TlsFileServer
    site: Path
    authority: Authority
    pki: Path

    @property
    def env(self) -> dict[str, str]:
        return {**CLEAN_ENV, "AWS_CA_BUNDLE": str(self.authority.cert)}


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    root = tmp_path_factory.mktemp("hostile-web")
    authority = make_authority(root / "pki", "storage-ca")
    site = root / "site"
    site.mkdir()
    with zipfile.ZipFile(site / "bomb.zip", "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        bundle.writestr("simple/1/model.onnx", bytes(16 * MiB))
    with tarfile.open(site / "bomb.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("simple/1/model.onnx")
        info.size = 16 * MiB
        tar.addfile(info, io.BytesIO(bytes(16 * MiB)))
    (site / "big.onnx").write_bytes(os.urandom(2 * MiB))
    server = TlsFileServer(site, authority.issue(root / "pki", "web"), ca=authority.cert)
    yield Web(server, site, authority, root / "pki")
    server.stop()


def failure_line(result: subprocess.CompletedProcess[str], uri: str) -> str:
    assert result.returncode == 1, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"cannot fetch {uri}: ")
    return line


def assert_left_empty(target: Path) -> None:
    """The repository folder exists (the volume's mount) and holds nothing: no staging."""
    assert list(target.iterdir()) == []


def cve_2025_4517_tar(path: Path, staging: Path) -> None:
    """The chain of CPython's reproduction, sized for ``staging`` (the folder unpacked into):
    symlinks that resolve past PATH_MAX, a symlink up out of the target through them, a hard
    link to a file beside the target, that file overwritten and a new one created."""
    steps = "abcdefghijklmnop"
    path_max = os.pathconf("/", "PC_PATH_MAX")
    long_name = "d" * ((path_max - len(str(staging)) - 1) // (len(steps) + 1))

    def add(name: str, kind: bytes, link: str = "", data: bytes = b"") -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.size, info.mode = kind, link, len(data), 0o777
        tar.addfile(info, io.BytesIO(data) if data else None)

    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        prefix = ""
        for step in steps:
            add(f"{prefix}{long_name}", tarfile.DIRTYPE)
            add(f"{prefix}{step}", tarfile.SYMTYPE, long_name)
            prefix = f"{prefix}{long_name}/"
        chain = "/".join([*steps, "l" * 254])
        add(chain, tarfile.SYMTYPE, "/".join([".."] * len(steps)))
        add("escape", tarfile.SYMTYPE, f"{chain}/..")
        add("flaglink", tarfile.LNKTYPE, "escape/flag.txt")
        add("flaglink", tarfile.REGTYPE, data=b"overwritten")
        add("escape/created.txt", tarfile.REGTYPE, data=b"created")


def test_the_cve_2025_4517_chain_is_refused_and_writes_nothing(web: Web, tmp_path: Path) -> None:
    """Served over https, unpacked into DIR/.cachefleet-fetching: the chain would overwrite
    DIR/flag.txt (beside the staging folder) and create DIR/created.txt."""
    target = tmp_path / "models"
    target.mkdir()
    (target / "flag.txt").write_text("original")
    cve_2025_4517_tar(web.site / "chain.tar", target / ".cachefleet-fetching")
    uri = web.server.url("chain.tar")
    line = failure_line(fetch_model(uri, target, web.env), uri)
    assert "archive member refused: " in line
    assert "symlink" in line
    assert (target / "flag.txt").read_text() == "original"
    assert sorted(p.name for p in target.iterdir()) == ["flag.txt"]  # no staging, no new file


@pytest.mark.parametrize("name", ["bomb.zip", "bomb.tar.gz", "big.onnx"])
def test_a_download_past_max_bytes_fails_and_leaves_nothing(
    web: Web, tmp_path: Path, name: str
) -> None:
    """A 16 KiB zip and tar.gz that inflate to 16 MiB, and a plain 2 MiB file, against 1Mi."""
    target = tmp_path / "models"
    uri = web.server.url(name)
    message_file = tmp_path / "termination-log"
    result = fetch_model(uri, target, web.env, "--max-bytes", "1Mi",
                   "--termination-message-file", str(message_file))  # fmt: skip
    line = failure_line(result, uri)
    assert "more than the limit of 1Mi (--max-bytes, the service's model.storageSizeLimit)" in line
    assert message_file.read_text().strip() == line
    assert_left_empty(target)
    assert (
        fetch_model(uri, target, web.env, "--max-bytes", "20Mi").returncode == 0
    )  # under it: fine


def test_bytes_are_counted_as_written_when_the_server_declares_no_length(
    web: Web, tmp_path: Path
) -> None:
    """The limit given as the operator gives it: CACHEFLEET_MAX_BYTES, the option's default."""
    server = RecordingServer(body=bytes(2 * MiB), declare_length=False,
                             issued=web.authority.issue(web.pki, "no-length"))  # fmt: skip
    try:
        uri = server.url("model.onnx")
        line = failure_line(
            fetch_model(uri, tmp_path / "m", {**web.env, "CACHEFLEET_MAX_BYTES": "1Mi"}), uri
        )
    finally:
        server.stop()
    assert "more than the limit of 1Mi" in line
    assert_left_empty(tmp_path / "m")


@pytest.fixture
def plain_http() -> Iterator[RecordingServer]:
    """Where a downgrade would land: a plain-http server that would serve a model."""
    server = RecordingServer(body=b"not a model from a verified server")
    yield server
    server.stop()


def test_a_redirect_from_https_to_http_is_refused(
    web: Web, plain_http: RecordingServer, tmp_path: Path
) -> None:
    redirecting = RecordingServer(status=302, location=plain_http.url("simple.onnx"),
                                  issued=web.authority.issue(web.pki, "redirecting"))  # fmt: skip
    try:
        uri = redirecting.url("simple.onnx")
        line = failure_line(fetch_model(uri, tmp_path / "m", web.env), uri)
    finally:
        redirecting.stop()
    port = plain_http.server.server_address[1]
    assert f"refused a redirect from https to http://127.0.0.1:{port}" in line
    assert plain_http.received == []  # never asked
    assert_left_empty(tmp_path / "m")


def test_a_redirect_that_stays_on_https_is_followed(web: Web, tmp_path: Path) -> None:
    (web.site / "moved.onnx").write_bytes(b"onnx bytes")
    redirecting = RecordingServer(status=302, location=web.server.url("moved.onnx"),
                                  issued=web.authority.issue(web.pki, "cdn"))  # fmt: skip
    try:
        result = fetch_model(redirecting.url("simple.onnx"), tmp_path / "m", web.env)
    finally:
        redirecting.stop()
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "m" / "simple" / "1" / "model.onnx").read_bytes() == b"onnx bytes"


def test_the_gcs_client_refuses_a_redirect_from_https_to_http(
    web: Web, plain_http: RecordingServer, tmp_path: Path
) -> None:
    """The GCS API on https (an emulator address) answering 302 to plain http."""
    redirecting = RecordingServer(status=302, location=plain_http.url("storage/v1/b/models/o"),
                                  issued=web.authority.issue(web.pki, "gcs"))  # fmt: skip
    env = {**CLEAN_ENV, "STORAGE_EMULATOR_HOST": redirecting.url().rstrip("/"),
           "REQUESTS_CA_BUNDLE": str(web.authority.cert)}  # fmt: skip
    try:
        line = failure_line(
            fetch_model("gs://models/repo", tmp_path / "m", env), "gs://models/repo"
        )
    finally:
        redirecting.stop()
    assert "refused a redirect from https to http://" in line
    assert plain_http.received == []
    assert_left_empty(tmp_path / "m")
