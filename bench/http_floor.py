"""The HTTP floor: a bare ASGI app on uvicorn (uvloop, httptools) that answers with canned bytes.

It answers ``POST /v2/models/{m}/infer`` of each floor model (``scenarios.FLOOR_MODELS``:
``simple``, and ``densenet_onnx`` with its 600 KB body) with the bytes ``cachefleet serve``
answered the bench's first hit body of that model with (captured from the run's own server,
headers included), and the few ``GET`` paths a load generator reads first (health, model
metadata, config, statistics) with what the server answered them with; it reads each request's
whole body with ``receive()`` and does nothing else: no routing framework, no decoding, no
cache, no encoding. uvicorn runs as ``cachefleet serve`` runs it (uvloop, httptools, no access
log, no proxy-headers middleware). What it reaches is the most any server on uvicorn reaches for
this request on the same core, so the report shows each server's 100%-hit throughput of the
model as a share of it.

The harness runs it as ``python -m cachefleet.bench.http_floor --canned FILE --port PORT``,
pinned like the servers, and loads it with the same generator, connections and duration as
the ``simple`` 100%-hit scenarios.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cachefleet.bench.bodies import RequestSet
from cachefleet.bench.errors import BenchError
from cachefleet.bench.measure import exchange
from cachefleet.bench.pinning import pinned
from cachefleet.bench.processes import ManagedProcess, free_port, http_ok
from cachefleet.bench.scenarios import FLOOR_MODEL

#: The model whose request the floor answers.
MODEL = FLOOR_MODEL
READY_PATH = "/v2/health/ready"
#: Headers uvicorn writes itself (or the floor computes): not part of the canned answer.
_OWN_HEADERS = frozenset({"date", "server", "content-length", "connection", "transfer-encoding"})

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Canned:
    """One captured answer: status, the server's own headers (lower-cased), body."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def document(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "headers": [list(pair) for pair in self.headers],
            "body": base64.b64encode(self.body).decode(),
        }

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Canned:
        return cls(
            int(document["status"]),
            tuple((str(name), str(value)) for name, value in document["headers"]),
            base64.b64decode(document["body"]),
        )


#: ``(method, path)`` -> the answer.
Answers = dict[tuple[str, str], Canned]


def capture(base_url: str, *request_sets: RequestSet) -> Answers:
    """What the server at ``base_url`` answers the floor's paths with: the ``GET`` paths it has
    (of each request set's model), and ``POST`` of each request set's first hit body (a hit,
    once the run has warmed it)."""
    answers: Answers = {}
    for requests in request_sets:
        if requests.encoding != "binary":
            raise BenchError("the HTTP floor answers binary requests only")
        for path in get_paths(requests.model):
            answer = _exchange(base_url, "GET", path, b"", {})
            if answer.status == 200:
                answers["GET", path] = answer
        answer = _exchange(
            base_url, "POST", requests.path, requests.hit_bodies[0], dict(requests.headers)
        )
        if answer.status != 200:
            raise BenchError(f"POST {base_url}{requests.path} answered {answer.status}")
        answers["POST", requests.path] = answer
    if ("GET", READY_PATH) not in answers:
        answers["GET", READY_PATH] = Canned(200, (), b"")
    return answers


def get_paths(model: str) -> tuple[str, ...]:
    """What a load generator may read of ``model`` before and between its loads: the bench's
    request set reads the model's metadata, perf_analyzer also the config, the statistics and
    the health paths."""
    return (
        "/v2", "/v2/health/live", READY_PATH, f"/v2/models/{model}",
        f"/v2/models/{model}/ready", f"/v2/models/{model}/config", f"/v2/models/{model}/stats",
    )  # fmt: skip


def _exchange(
    base_url: str, method: str, path: str, body: bytes, headers: dict[str, str]
) -> Canned:
    answer = exchange(base_url, method, path, body, headers, timeout_s=30)
    kept = tuple(
        (name.lower(), value) for name, value in answer.headers if name.lower() not in _OWN_HEADERS
    )
    return Canned(answer.status, kept, answer.body)


def save(answers: Answers, path: Path) -> Path:
    document = [
        {"method": method, "path": route, **answer.document()}
        for (method, route), answer in answers.items()
    ]
    path.write_bytes(orjson.dumps(document))
    return path


def load(path: Path) -> Answers:
    return {
        (str(entry["method"]), str(entry["path"])): Canned.from_document(entry)
        for entry in orjson.loads(path.read_bytes())
    }


def application(answers: Answers) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The ASGI app: read the request's body, send the canned answer (404 for anything else)."""
    prepared = {
        key: (
            {
                "type": "http.response.start",
                "status": answer.status,
                "headers": [
                    (name.encode("latin-1"), value.encode("latin-1"))
                    for name, value in answer.headers
                ]
                + [(b"content-length", str(len(answer.body)).encode())],
            },
            {"type": "http.response.body", "body": answer.body},
        )
        for key, answer in answers.items()
    }
    missing = (
        {"type": "http.response.start", "status": 404, "headers": [(b"content-length", b"0")]},
        {"type": "http.response.body", "body": b""},
    )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        more = True
        while more:
            message = await receive()
            more = bool(message.get("more_body", False))
        start, body = prepared.get((scope["method"], scope["path"]), missing)
        await send(start)
        await send(body)

    return app


def start(answers: Answers, logdir: Path, cpus: str | None) -> tuple[ManagedProcess, str]:
    """The floor on a free loopback port, pinned to ``cpus``; returns it and its base URL."""
    port = free_port()
    canned = save(answers, logdir / f"http-floor-{port}.json")
    command = [sys.executable, "-P", "-m", "cachefleet.bench.http_floor",
               "--canned", str(canned), "--port", str(port)]  # fmt: skip
    process = ManagedProcess(
        "HTTP floor (bare uvicorn)",
        pinned(command, cpus),
        logdir / f"http-floor-{port}.log",
        dict(os.environ),
    )
    base_url = f"http://127.0.0.1:{port}"
    process.wait_until(http_ok(f"{base_url}{READY_PATH}"), 60)  # stops it if it never is
    return process, base_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--canned", type=Path, required=True, help="answers written by save()")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    import uvicorn

    uvicorn.run(
        application(load(args.canned)),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        # As ``cachefleet serve`` runs uvicorn: no X-Forwarded-* middleware in front.
        proxy_headers=False,
        server_header=False,
        log_level="warning",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
