"""The wrk Lua script against a recording HTTP server: the hit ratio holds, misses never repeat.

The recorder is a plain stdlib server, so this checks the script itself (thread-disjoint miss
counters, exact miss spacing), not our inference server.
"""

from __future__ import annotations

import collections
import http.server
import threading
from collections.abc import Iterator

import pytest

from cachefleet.bench import wrk
from cachefleet.bench.bodies import InputSpec, build_request_set, new_nonce
from cachefleet.bench.load import LoadSpec

pytestmark = pytest.mark.skipif(not wrk.available(), reason="wrk is not installed")


class _Recorder(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: collections.Counter[bytes] = collections.Counter()
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.lock:
            self.bodies[body] += 1
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return None


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """wrk resets its connections when it stops; that is not an error here."""


@pytest.fixture
def recorder() -> Iterator[tuple[str, collections.Counter[bytes]]]:
    _Recorder.bodies = collections.Counter()
    server = _QuietServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.bodies
    server.shutdown()
    server.server_close()


def test_misses_are_unique_across_threads_and_hits_reuse_the_warm_set(
    recorder: tuple[str, collections.Counter[bytes]],
) -> None:
    url, bodies = recorder
    inputs = [InputSpec("INPUT0", "INT32", (1, 16)), InputSpec("INPUT1", "INT32", (1, 16))]
    requests = build_request_set("simple", inputs, ["OUTPUT0"], "binary", warm_count=4)
    result = wrk.run(LoadSpec(url, requests, 4, 1, 0.5, new_nonce()), threads=2)

    assert result.requests > 20
    assert result.errors == 0
    misses = {body: count for body, count in bodies.items() if body not in requests.hit_bodies}
    assert all(count == 1 for count in misses.values())
    assert set(bodies) - set(misses) <= set(requests.hit_bodies)
    hit_count = sum(bodies.values()) - len(misses)
    # Exactly one miss every other request per thread; requests in flight at the end may differ.
    assert abs(len(misses) - hit_count) <= 6
