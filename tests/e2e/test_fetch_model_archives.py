"""`cachefleet fetch-model` on the one archive a URI names, served over https on loopback: a tar
is unpacked as it streams, so the model volume holds only its tree (``--max-bytes`` bounds the
tree, not the tree and the archive together); a hostile member that comes after good ones still
leaves nothing in the repository, staging folder included; a zip waits in ``--scratch-dir``
(the operator's scratch emptyDir), which is left empty.

The payloads are random bytes, so an archive is as large as its tree and "tree + archive" is
about twice the tree: 1.5 MiB of files against a limit of 2Mi.
"""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.certificates import make_authority
from support.object_stores import TlsFileServer
from support.processes import fetch_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

KiB, MiB = 1 << 10, 1 << 20
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "STORAGE_"))
}
WEIGHTS = os.urandom(3 * MiB // 2)  # incompressible: the .tar.gz is as large as its tree
TREE = {"simple/config.pbtxt": b'name: "simple"\n', "simple/1/model.onnx": WEIGHTS}


@dataclass(frozen=True)
class Web:
    server: TlsFileServer
    site: Path

    @property
    def env(self) -> dict[str, str]:
        return {**CLEAN_ENV, "AWS_CA_BUNDLE": str(self.server.ca)}


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE,
        link: str = "") -> None:  # fmt: skip
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.size = kind, link, len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


def good_members(tar: tarfile.TarFile) -> None:
    """The tree a hostile member follows: written to staging before the refusal comes."""
    for name, data in TREE.items():
        add(tar, name, data)


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Web]:
    root = tmp_path_factory.mktemp("archives-web")
    authority = make_authority(root / "pki", "storage-ca")
    site = root / "site"
    site.mkdir()
    with tarfile.open(site / "repository.tar.gz", "w:gz") as tar:
        good_members(tar)
    with zipfile.ZipFile(site / "repository.zip", "w") as bundle:
        for name, data in TREE.items():
            bundle.writestr(name, data)
    hostile: dict[str, Callable[[tarfile.TarFile], None]] = {
        "dot-dot.tar.gz": lambda tar: add(tar, "simple/../../escaped.txt", b"x"),
        "symlink.tar.gz": lambda tar: add(tar, "simple/2", kind=tarfile.SYMTYPE, link="/etc"),
        # Declares 1 MiB after 1.5 MiB written: past the 2Mi limit before its data is read.
        "past-the-limit.tar.gz": lambda tar: add(tar, "simple/2/model.onnx", bytes(MiB)),
    }
    for name, last in hostile.items():
        with tarfile.open(site / name, "w:gz") as tar:
            good_members(tar)
            last(tar)
    server = TlsFileServer(site, authority.issue(root / "pki", "web"), ca=authority.cert)
    yield Web(server, site)
    server.stop()


def files_under(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_tar_gz_whose_tree_fits_is_fetched_though_tree_and_archive_do_not(
    web: Web, tmp_path: Path
) -> None:
    """Before, the archive was written into the model volume and counted with its tree: 1.5 MiB
    of archive and 1.5 MiB of tree against 2Mi failed with "more than the limit"."""
    assert (web.site / "repository.tar.gz").stat().st_size > MiB  # tree + archive > 2Mi
    target = tmp_path / "models"
    result = fetch_model(web.server.url("repository.tar.gz"), target, web.env, "--max-bytes", "2Mi")
    assert result.returncode == 0, result.stderr
    assert files_under(target) == TREE  # no archive left, no staging folder


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("dot-dot.tar.gz", "climbs out with '..'"),
        ("symlink.tar.gz", "is a symlink (to '/etc')"),
        ("past-the-limit.tar.gz", "more than the limit of 2Mi (--max-bytes"),
    ],
)
def test_a_hostile_member_after_good_ones_leaves_nothing(
    web: Web, tmp_path: Path, name: str, reason: str
) -> None:
    """The good members were unpacked into the staging folder as they streamed; the refusal
    removes it, and the repository keeps what it held."""
    target = tmp_path / "models"
    target.mkdir()
    (target / "other").mkdir()
    (target / "other" / "kept.txt").write_text("a model already there")
    uri = web.server.url(name)
    result = fetch_model(uri, target, web.env, "--max-bytes", "2Mi")
    assert result.returncode == 1, result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"cannot fetch {uri}: ")
    assert reason in line
    assert files_under(target) == {"other/kept.txt": b"a model already there"}
    assert sorted(p.name for p in target.iterdir()) == ["other"]  # no staging folder
    assert not (tmp_path / "escaped.txt").exists()


def test_a_zip_waits_in_the_scratch_folder_and_leaves_it_empty(web: Web, tmp_path: Path) -> None:
    """As the operator runs it: CACHEFLEET_SCRATCH_DIR names the scratch emptyDir. Without it
    the zip waits beside its tree, and both count against the limit."""
    uri = web.server.url("repository.zip")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**web.env, "CACHEFLEET_MAX_BYTES": "2Mi", "CACHEFLEET_SCRATCH_DIR": str(scratch)}
    result = fetch_model(uri, tmp_path / "models", env)
    assert result.returncode == 0, result.stderr
    assert files_under(tmp_path / "models") == TREE
    assert list(scratch.iterdir()) == []
    beside = fetch_model(uri, tmp_path / "beside", {**web.env, "CACHEFLEET_MAX_BYTES": "2Mi"})
    assert beside.returncode == 1
    assert "more than the limit of 2Mi" in beside.stderr
    assert list((tmp_path / "beside").iterdir()) == []
