"""`cachefleet flush --server`: an address that answers with a redirect to another host gets no
second request, so the admin header (the ``cache`` restriction's, or ``--header``'s) never
reaches that host, and the flush, which did not happen, fails with exit status 1.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from support.object_stores import RecordingServer
from support.processes import CACHEFLEET

TOKEN = "admin-token-never-elsewhere"


@pytest.fixture
def elsewhere() -> Iterator[RecordingServer]:
    """Another host that answers every request with 200 ``{"status": "ok"}``."""
    server = RecordingServer()
    yield server
    server.stop()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirected_flush_sends_no_header_elsewhere_and_fails(
    elsewhere: RecordingServer, status: int
) -> None:
    redirecting = RecordingServer(status=status, location=elsewhere.url("collect"))
    env = {**os.environ, "CACHEFLEET_HTTP_RESTRICTED_API": f"cache:admin-key={TOKEN}"}
    command = [*CACHEFLEET, "flush", "--model", "simple", "--server", redirecting.url(),
               "--header", f"Authorization: Bearer {TOKEN}"]  # fmt: skip
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    finally:
        redirecting.stop()
    [asked] = redirecting.received
    assert asked.headers["admin-key"] == TOKEN  # the server named was asked, with its header
    assert elsewhere.received == []  # the other host never was
    assert result.returncode == 1
    assert f"HTTP {status} redirected to {elsewhere.url('collect')}: not followed" in result.stderr
    assert "ok" not in result.stdout


def test_a_server_error_is_a_failed_flush() -> None:
    failing = RecordingServer(status=500, body=b'{"error": "flush failed"}')
    command = [*CACHEFLEET, "flush", "--model", "simple", "--server", failing.url()]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    finally:
        failing.stop()
    assert result.returncode == 1
    assert 'HTTP 500 {"error": "flush failed"}' in result.stderr
