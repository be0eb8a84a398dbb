"""Fixtures shared by every test: real processes on free loopback ports, never mocks.

- ``make_redis``/``redis_server``: a real ``redis-server`` without persistence, killed at teardown.
- ``model_repository``: the sample models, written once per run by ``cachefleet samples`` (the
  DenseNets only for modules marked ``full_samples``).
- ``make_server`` / ``server``: a real ``cachefleet serve`` process (HTTP and gRPC on free
  ports), stopped at teardown.

Under ``CI=true`` any skipped test fails, except those marked ``gpu`` (``support/ci_skips.py``).
"""

from __future__ import annotations

import fcntl
import functools
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Shared operator fixtures, loaded as a plugin by the modules that use them (pytest_plugins) after
# those modules import its helpers: register it first so its asserts are still rewritten.
pytest.register_assert_rewrite("support")
#: Under CI=true a skip fails the test (see support/ci_skips.py).
pytest_plugins = ("support.ci_skips",)

from support.processes import (  # noqa: E402  (after the assert-rewrite registration)
    CACHEFLEET,
    RedisProcess,
    ServerProcess,
    openssl,
)


def pytest_configure(config: pytest.Config) -> None:
    """Servers the tests start (and the commands they run) use every cache tier they are given:
    with ``auto``, admission may skip a tier for the cheap sample models once it has measured
    them, which would turn the hits that tests of the tiers expect into bypasses. Admission's own
    tests ask for ``--cache-admission auto``."""
    os.environ.setdefault("CACHEFLEET_CACHE_ADMISSION", "always")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files marked ``slow`` first (in their usual order, the rest after them): with one worker
    per core taking whole files, a long file started last would leave the other cores idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def kubernetes_schemas_parsed_once() -> Iterator[None]:
    """kubernetes-validate reads and parses a schema file (its definitions file is megabytes of
    JSON) on every ``validate`` call, 15 ms an object: the operator tests validate thousands.
    The files never change in a run, so each is parsed once; the validation itself is untouched
    (the schemas are only read, never modified, by it)."""
    import kubernetes_validate.utils

    with pytest.MonkeyPatch.context() as patch:
        reader = functools.cache(kubernetes_validate.utils.schema_contents)
        patch.setattr(kubernetes_validate.utils, "schema_contents", reader)
        yield


@pytest.fixture
def make_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RedisProcess]]:
    """Start redis-servers with extra arguments, e.g. ``make_redis("--maxmemory", "1mb")``."""
    started: list[RedisProcess] = []

    def make(*args: str, password: str | None = None) -> RedisProcess:
        redis = RedisProcess(tmp_path_factory.mktemp("redis"), *args, password=password)
        redis.start()
        started.append(redis)
        return redis

    yield make
    for redis in started:
        redis.stop()


@pytest.fixture
def redis_server(make_redis: Callable[..., RedisProcess]) -> RedisProcess:
    return make_redis()


#: The samples every server loads in a few milliseconds; the two DenseNets (31 MB each) cost
#: a server about 1.4 s of CPU to load, and most test modules never send them a request.
LIGHT_SAMPLES = ("simple", "simple_string", "simple_int8", "simple_identity")


@pytest.fixture(scope="session")
def full_model_repository(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """The whole sample repository, written once per test run (a few seconds of CPU): the
    xdist workers share one in the run's temporary folder, the first to take the lock writes
    it (the way pytest-xdist's documentation runs a session fixture once). No test writes to
    it; tests that change models copy them out first."""
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # every worker's folder sits in the run's
    path = root / "sample-models" / "repo"
    with (root / "sample-models.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_dir():
            staging = root / "sample-models-partial"
            shutil.rmtree(staging, ignore_errors=True)
            subprocess.run([*CACHEFLEET, "samples", str(staging / "repo")], check=True)
            staging.rename(path.parent)
    return path


@pytest.fixture(scope="session")
def light_model_repository(
    full_model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The samples without the DenseNets, copied (a few KB): the server follows no symlink out
    of its repository."""
    path = tmp_path_factory.mktemp("light-models") / "repo"
    for name in LIGHT_SAMPLES:
        shutil.copytree(full_model_repository / name, path / name)
    return path


@pytest.fixture(scope="module")
def model_repository(
    request: pytest.FixtureRequest, full_model_repository: Path, light_model_repository: Path
) -> Path:
    """The sample repository a module's servers load: the whole one for a module marked
    ``full_samples`` (``pytestmark = pytest.mark.full_samples``: it sends the DenseNets requests
    or reads their files), else the light one (every server of the suite loading both DenseNets
    cost minutes of the test command's budget). A module left unmarked that needs a DenseNet
    fails loudly: its requests are 404s and its files are missing."""
    wanted = request.node.get_closest_marker("full_samples") is not None
    return full_model_repository if wanted else light_model_repository


@pytest.fixture(scope="module")
def sample_server(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    """A server on the sample models, one per test module: its counters and cache start empty
    there, and modules that do not need a fresh cache per test do not pay a start-up each."""
    server = ServerProcess(
        ["--model-repository", str(model_repository)], tmp_path_factory.mktemp("server")
    )
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA, and a certificate for 127.0.0.1 signed by it (Redis and its clients use it)."""
    folder = tmp_path_factory.mktemp("tls")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=cachefleet-test-ca", cwd=folder)  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "node.key", "-out", "node.csr",
            "-subj", "/CN=127.0.0.1", cwd=folder)  # fmt: skip
    (folder / "ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", "node.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "node.crt", "-days", "2", "-extfile", "ext",
            cwd=folder)  # fmt: skip
    return folder


@pytest.fixture
def make_server(model_repository: Path, tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start servers on the sample repository: ``make_server("--cache", "redis", ...)``."""
    started: list[ServerProcess] = []

    def make(
        *args: str, env: dict[str, str] | None = None, repository: Path | None = None
    ) -> ServerProcess:
        repo = repository or model_repository
        server = ServerProcess(["--model-repository", str(repo), *args], tmp_path, env=env)
        server.start()
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


@pytest.fixture
def server(make_server: Callable[..., ServerProcess]) -> ServerProcess:
    """A server with the default settings (local cache) on the sample repository."""
    return make_server()
