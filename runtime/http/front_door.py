"""The infer route as a plain ASGI callable in front of the FastAPI application.

A cache hit on a small model costs a few tens of microseconds of real work; Starlette's
routing, middleware stack, ``Request`` object and exception machinery cost more than that.
So ``POST /v2/models/{m}[/versions/{v}]/infer`` is answered here, straight from the ASGI
scope, and every other request (and the lifespan) falls through to the application
unchanged. The behaviour is the route's: the same body limit and decompression, the same
service call, the same ``{"error": ...}`` answers and headers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.http.body import collect_body, parse_header_length
from cachefleet.runtime.http.client_watch import ClientWatch
from cachefleet.runtime.http.compression import compress_for
from cachefleet.runtime.http.state import ServerState
from cachefleet.runtime.protocol.cache_control import directives_from

log = logging.getLogger(__name__)

_JSON = b"application/json"
_BINARY = b"application/octet-stream"
#: The request headers the infer path reads; everything else is ignored.
_WANTED = frozenset(
    {
        b"content-length",
        b"content-encoding",
        b"inference-header-content-length",
        b"cache-control",
        b"accept-encoding",
    }
)


class ClientGoneError(Exception):
    """The client disconnected before its body arrived: there is no one to answer."""


def infer_route(path: str) -> tuple[str, str | None] | None:
    """``(model, version)`` of an infer path, None for any other path.

    Matches what the Starlette routes match: ``/v2/models/{m}/infer`` and
    ``/v2/models/{m}/versions/{v}/infer``, each segment non-empty and free of ``/``.
    """
    if not path.startswith("/v2/models/") or not path.endswith("/infer"):
        return None
    parts = path[11:-6].split("/")
    if len(parts) == 1 and parts[0]:
        return parts[0], None
    if len(parts) == 3 and parts[1] == "versions" and parts[0] and parts[2]:
        return parts[0], parts[2]
    return None


class InferFrontDoor:
    """Answers infer requests itself; hands everything else to ``app``."""

    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self._state = state
        self._limit = state.settings.server.max_request_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            route = infer_route(scope["path"])
            if route is not None:
                await self._infer(scope, receive, send, *route)
                return
        await self.app(scope, receive, send)

    async def _infer(
        self, scope: Scope, receive: Receive, send: Send, model: str, version: str | None
    ) -> None:
        headers = {name: value for name, value in scope["headers"] if name in _WANTED}
        task = asyncio.current_task()
        watch: ClientWatch | None = None

        def on_wait() -> None:
            """The request waits for a model: from now on, a hang-up cancels it (made only
            then, so that a hit pays nothing for it)."""
            nonlocal watch
            if watch is None:
                watch = ClientWatch(Request(scope, receive), task)
            watch.start()

        try:
            service = self._state.ready_service()
            body = await collect_body(
                _chunks(receive),
                _text(headers.get(b"content-length")),
                _text(headers.get(b"content-encoding")),
                self._limit,
            )
            outcome = await service.infer(
                model,
                version,
                body,
                parse_header_length(_text(headers.get(b"inference-header-content-length"))),
                directives_from(_text(headers.get(b"cache-control"))),
                on_wait=on_wait,
            )
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise
            return  # the client has gone: nobody reads an answer
        except ClientGoneError:
            return
        except ServingError as error:
            if error.status_code >= 500:
                log.warning("POST %s: %s", scope["path"], error.message)
            await _error(send, error.status_code, error.message)
            return
        except Exception as error:  # a bug: answer as the app's last-resort handler does
            log.exception("unexpected error on POST %s", scope["path"])
            await _error(send, 500, f"internal server error: {type(error).__name__}")
            return
        finally:
            if watch is not None:
                watch.stop()
        response = outcome.body
        extra: list[tuple[bytes, bytes]] = [(b"x-cache", outcome.cache_status.value.encode())]
        accept = headers.get(b"accept-encoding")
        if accept is not None:
            response, encoding = compress_for(accept.decode("latin-1"), response)
            if encoding is not None:
                extra.append((b"content-encoding", encoding.encode()))
        if outcome.header_length is None:
            media = _JSON
        else:
            media = _BINARY
            extra.append((b"inference-header-content-length", b"%d" % outcome.header_length))
        await _respond(send, 200, media, response, extra)


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGoneError
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


async def _error(send: Send, status: int, message: str) -> None:
    # Every infer response says how the cache answered; a refused request never used it.
    body = orjson.dumps({"error": message})
    await _respond(send, status, _JSON, body, [(b"x-cache", b"bypass")])


async def _respond(
    send: Send, status: int, media: bytes, body: bytes, extra: list[tuple[bytes, bytes]]
) -> None:
    headers = [(b"content-length", b"%d" % len(body)), (b"content-type", media), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
