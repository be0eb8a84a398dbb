"""Leading with ``--leader-election``: wait for the Lease (answering liveness meanwhile), keep
it while kopf runs, stop at once when it is lost, and release it on shutdown.

A standby must answer the liveness probe while it waits, or the kubelet restarts it again and
again and its restart back-off delays the takeover it is there for; kopf serves the endpoint
only once it runs, so until then a small server of our own answers on the same address.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import threading
import urllib.parse
from collections.abc import Iterator

from cachefleet.operator.reconcile.lease import LeaseElector

log = logging.getLogger(__name__)


class _Healthz(http.server.BaseHTTPRequestHandler):
    """200 on the liveness path: the process is alive and waiting for the lease."""

    path_expected = "/healthz"

    def do_GET(self) -> None:
        found = urllib.parse.urlsplit(self.path).path == self.path_expected
        body = b'{"standby": true}' if found else b"{}"
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Probes every few seconds are not worth a log line each."""


@contextlib.contextmanager
def standby_liveness(url: str | None) -> Iterator[None]:
    """Answer ``url`` (kopf's ``--liveness`` form) until the block ends, then free the port."""
    if not url:
        yield
        return
    parts = urllib.parse.urlsplit(url)
    handler = type("Healthz", (_Healthz,), {"path_expected": parts.path or "/"})
    server = http.server.ThreadingHTTPServer((parts.hostname or "", parts.port or 80), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="standby-liveness", daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _stop_now() -> None:
    """Exit without another write: the pod restarts as a standby."""
    logging.shutdown()
    os._exit(1)


@contextlib.contextmanager
def leading(elector: LeaseElector, liveness: str | None) -> Iterator[None]:
    """Hold the lease for the block: acquire it, renew it in a thread (exiting the process the
    moment a renewal misses its deadline), and release it when the block ends."""
    with standby_liveness(liveness):
        elector.acquire()
    stop = threading.Event()

    def keep() -> None:
        elector.keep(_stop_now, stop)

    keeper = threading.Thread(target=keep, name="lease-keeper", daemon=True)
    keeper.start()
    try:
        yield
    finally:
        stop.set()
        keeper.join(timeout=elector.timings.renew_deadline_s)
        elector.release()
