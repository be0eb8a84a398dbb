"""The declared floors of redis-py and uvicorn run the code that depends on them, and uvicorn,
whose internals one module touches (``runtime/http/uvicorn_protocol.py``), is bounded to the
minor releases that are tested: its floor, here, and the development environment's release,
which the whole suite runs.

As ``tests/operator/test_client_floor.py`` does for the Kubernetes client: each floor is
installed exactly (kept in ``.cache/dependency-floor``, so only the first run downloads it),
put in front of the development environment's own copy with ``PYTHONPATH`` (which the servers
the tests start inherit), and the tests that exercise it run in a pytest of their own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache" / "dependency-floor"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: The tests that exercise each dependency: the Redis tier's own connection and its contract
#: over redis-py; the uvicorn protocols' deadlines, cap and memo hits answered below ASGI (what
#: ``uvicorn_protocol`` reads of uvicorn), nothing the ASGI app alone decides.
EXERCISED = {
    "redis": [
        "tests/runtime/test_cache_pipelined.py",
        "tests/runtime/test_cache_redis_contract.py",
        "tests/runtime/test_cache_redis_faults.py",
        "tests/runtime/test_cache_connections.py",
    ],
    "uvicorn": [
        "tests/runtime/test_http_connection_guard.py",
        "tests/runtime/test_http_answer_now.py",
        "tests/e2e/test_http_memo_wire.py",
        "tests/e2e/test_http_limits.py::test_a_slow_head_is_cut_off_within_its_deadline",
        "tests/e2e/test_http_limits.py::test_a_slow_body_is_cut_off_while_others_are_served",
        "tests/e2e/test_http_limits.py::test_connections_over_the_cap_get_503_with_retry_after",
        "tests/e2e/test_http_limits.py::test_a_pipelined_request_that_never_sends_its_body_gives_its_place_back",
        "tests/e2e/test_http_limits.py::test_a_pipelined_request_with_a_200_kb_body_is_answered",
        "tests/e2e/test_http_limits.py::test_answers_nobody_reads_stay_charged_until_their_clients_are_cut_off",
        "tests/e2e/test_http_limits.py::test_requests_pipelined_behind_unread_answers_give_their_places_back",
    ],
}


def specifier(package: str) -> SpecifierSet:
    """The runtime extra's version range for ``package``."""
    runtime = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["runtime"]
    [spec] = [d for d in runtime if re.match(rf"{package}\b", d)]
    return SpecifierSet(re.sub(rf"^{package}(\[[a-z,]+\])?", "", spec.replace(" ", "")))


def floor(package: str) -> str:
    [lowest] = [s.version for s in specifier(package) if s.operator == ">="]
    return lowest


def floor_install(package: str, version: str) -> Path:
    """Exactly ``package==version``, without its dependencies (the environment's serve)."""
    target = CACHE / f"{package}-{version}"
    if not (target / package).is_dir():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--target", str(target), f"{package}=={version}"], check=True)
    return target


@pytest.mark.parametrize("package", sorted(EXERCISED))
def test_the_declared_floor_runs_the_code_that_uses_it(package: str) -> None:
    version = floor(package)
    target = floor_install(package, version)
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    show = f"import {package}; print({package}.__version__, {package}.__file__)"
    found = subprocess.run(
        [sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=60
    )
    assert found.returncode == 0, found.stderr
    installed, where = found.stdout.split()
    assert Version(installed) == Version(version)
    assert where.startswith(str(target))
    tests = EXERCISED[package]
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *tests]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout
    assert "skipped" not in done.stdout


def test_uvicorn_is_bounded_to_the_minor_releases_that_are_tested() -> None:
    """The protocols subclass uvicorn's internals: a release past the bound may move them, and
    a minor release inside it that no test runs may have moved them already. The floor runs
    above; the development environment's release runs the whole suite; the bound holds no
    other minor release."""
    import uvicorn

    allowed = specifier("uvicorn")
    [upper] = [Version(s.version) for s in allowed if s.operator == "<"]
    lowest, installed = Version(floor("uvicorn")), Version(uvicorn.__version__)
    assert installed in allowed, (uvicorn.__version__, allowed)
    tested = {lowest.release[:2], installed.release[:2]}
    major, minor = lowest.release[:2]
    inside = set()
    while Version(f"{major}.{minor}") < upper:
        inside.add((major, minor))
        minor += 1
    assert inside <= tested, (sorted(inside - tested), allowed)
