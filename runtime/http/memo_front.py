"""Memoized infer answers for the HTTP protocol itself, before any of ASGI is built.

A memoized answer (see ``infer_answers``) is a digest and a dictionary lookup; on ``simple`` it
costs a few microseconds, while the ASGI machinery around it (uvicorn's request/response cycle,
its event and task, the ``receive``/``send`` coroutines, the header checks on the way out) costs
several times that. So the HTTP protocol (``memo_protocol``) asks this front, from the request's
raw head, whether the request may be answered from the memo; if so it holds the body as it
arrives and, once the body is whole, asks for the answer: the memoized response, counted as the
endpoint counts one, or None. Whatever the front declines, the protocol hands on to the
application unchanged, body included, and the ordinary path answers it.

The front takes only the plainest requests, and declines everything whose answer depends on
more than the memo: ``Cache-Control`` (directives), ``Accept-Encoding`` (compression),
``Content-Encoding`` and ``Transfer-Encoding`` (a body to decode first), a body longer than
:data:`MAX_BODY_BYTES` or the limit, a header length that is not a number, and a request the
``--http-restricted-api`` restriction refuses (the ordinary path refuses it, with its message).
A request it answers holds nothing across an await: it neither waits for nor takes a share of
the budget of requests in flight, which bounds what waiting requests hold.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from cachefleet.runtime.cache.memo import MemoEntry
from cachefleet.runtime.composition import RuntimeSlot
from cachefleet.runtime.http.infer_endpoint import InferEndpoint
from cachefleet.runtime.http.infer_shortcut import infer_route
from cachefleet.runtime.protocol.cache_control import directives_from

#: The longest body the protocol holds for the memo: more is read the ordinary way, with the
#: flow control and deadlines of a body the application reads (uvicorn's high-water mark).
MAX_BODY_BYTES = 64 * 1024
#: Headers whose presence leaves the request to the ordinary path (see the module).
_DECLINED = frozenset(
    {b"cache-control", b"accept-encoding", b"content-encoding", b"transfer-encoding"}
)
_DIRECTIVES = directives_from(None)


class Ticket(NamedTuple):
    """An infer request the memo may answer once its body is in."""

    model: str
    version: str | None
    header_length: int | None


class MemoFront:
    """Answers memoized infer requests for the HTTP protocol (see the module)."""

    def __init__(self, slot: RuntimeSlot, endpoint: InferEndpoint) -> None:
        self._slot = slot
        self._endpoint = endpoint
        self._max_body = min(MAX_BODY_BYTES, endpoint.limit)

    def ticket(self, target: bytes, headers: list[tuple[bytes, bytes]]) -> Ticket | None:
        """A ticket when a ``POST`` to ``target`` (the request line's, raw) with ``headers``
        (names lower-case) may be answered from the memo; None when it is the ordinary path's."""
        if self._slot.runtime is None or b"%" in target:
            return None
        route = infer_route(target.decode("latin-1"))
        if route is None:
            return None
        declared = header_text = presented = None
        restricted = self._endpoint.restricted_header
        for name, value in headers:
            if name == b"content-length":
                declared = value
            elif name == b"inference-header-content-length":
                header_text = value
            elif name in _DECLINED:
                return None
            elif name == restricted:
                presented = value
        if declared is None or not declared.isdigit() or int(declared) > self._max_body:
            return None
        if header_text is not None and not header_text.isdigit():
            return None
        if not self._endpoint.admits(presented):
            return None
        header_length = None if header_text is None else int(header_text)
        return Ticket(route[0], route[1], header_length)

    def answer(self, ticket: Ticket, body: list[bytes]) -> MemoEntry | None:
        """The memoized response for ``ticket``'s request with ``body`` (its pieces), counted
        as the endpoint counts a memoized answer; None (nothing counted) when there is none."""
        runtime = self._slot.runtime
        if runtime is None:
            return None
        answers = self._endpoint.answers_of(runtime)
        model, version, header_length = ticket
        hasher = answers.hasher(model, version, header_length, _DIRECTIVES)
        if hasher is None:
            return None
        for piece in body:
            hasher.update(piece)
        started_ns = time.perf_counter_ns()
        return answers.memoized(model, version, hasher.digest(), started_ns)


def header_lines(found: MemoEntry) -> bytes:
    """``found``'s response headers as HTTP/1.1 header lines."""
    return b"".join(b"%s: %s\r\n" % pair for pair in found.headers or ())
