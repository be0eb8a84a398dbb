"""The one infer endpoint: ``POST /v2/models/{m}[/versions/{v}]/infer`` as a plain ASGI app.

It reads the ASGI scope and messages itself (no ``Request`` object, no exception machinery):
the body within the limit, decompressed, admitted against the budget of requests and bytes in
flight; the service's answer rendered for HTTP; refusals through the one error mapping
(``errors``). The router reaches it through its routes, and ``infer_shortcut`` straight from
the scope.

The cheapest answer, a memoized response (see ``infer_answers``), is found before any
of the service's asynchronous path: the body is hashed piece by piece as it arrives (never
joined), the memo answers and counts in one synchronous call, and the response goes out as
one message pair whose headers were built when the response was memoized. No task lookup,
no closure, no coroutine of ours beyond this one.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.cache.memo import MemoEntry
from cachefleet.runtime.composition import Runtime, RuntimeSlot
from cachefleet.runtime.errors import BadRequestError, ServingError
from cachefleet.runtime.http.body import (
    ClientGoneError,
    inflate,
    joined,
    parse_header_length,
    receive_parts,
)
from cachefleet.runtime.http.body_charge import BodyCharge
from cachefleet.runtime.http.client_watch import ClientWatch
from cachefleet.runtime.http.compression import compress_for
from cachefleet.runtime.http.errors import error_answer
from cachefleet.runtime.http.infer_answers import ServiceAnswers, answers_for
from cachefleet.runtime.http.infer_codec import answer_headers, header_length_of
from cachefleet.runtime.http.restricted import ApiGuard, RestrictedApiError, refusal_message
from cachefleet.runtime.protocol.cache_control import directives_from
from cachefleet.runtime.service.request_budget import RequestBudget

log = logging.getLogger(__name__)

_JSON = b"application/json"


class InferEndpoint:
    """``POST /v2/models/{m}[/versions/{v}]/infer``: the server's one infer handler.

    An ASGI application: the router reaches it through its routes, and
    :class:`~cachefleet.runtime.http.infer_shortcut.InferShortcut` straight from the ASGI
    scope through :meth:`serve`, without the router's cost.
    """

    def __init__(self, slot: RuntimeSlot) -> None:
        self._slot = slot
        settings = slot.settings
        self._limit = settings.server.max_request_bytes
        #: ``--http-restricted-api``'s restriction of the inference group, if any.
        self._restriction = ApiGuard(settings.security.http_restricted_api).restriction("inference")
        #: The runtime the answers below were made for, and those answers.
        self._answers: tuple[Runtime, ServiceAnswers] | None = None
        #: The (lower-case) header the restriction reads, b"" when there is none.
        self.restricted_header = (
            self._restriction.header.lower().encode() if self._restriction is not None else b""
        )

    @property
    def limit(self) -> int:
        """The body limit (``--max-request-size``)."""
        return self._limit

    def admits(self, presented: bytes | None) -> bool:
        """Whether the inference group's restriction (if any) admits the presented value."""
        return self._restriction is None or self._restriction.admits(presented)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """As a route's endpoint: the router matched the path and the method."""
        params = scope["path_params"]
        await self.serve(scope, receive, send, params["model"], params.get("version") or None)

    async def serve(
        self, scope: Scope, receive: Receive, send: Send, model: str, version: str | None
    ) -> None:
        """Answer the infer request for ``model`` (at ``version``) that ``scope`` carries.

        Admit the request (a count, and the bytes of its body's first step, against the
        budget) before a byte of its body is read, answer it (its share growing with its
        body: see ``body_charge``), and give its share back."""
        try:
            runtime = self._slot.ready()
            budget = runtime.budget
            charge = self._charge(scope, budget)
            cost = charge.opening_cost()
            if not budget.try_enter(cost):
                await budget.wait(cost)
        except ServingError as error:  # not loaded yet, over the budget, or never fitting it
            await _refuse(send, scope, error)
            return
        charge.taken = cost
        try:
            await self._admitted(
                scope, receive, send, model, version, self.answers_of(runtime), charge
            )
        finally:
            budget.leave(charge.taken)

    def answers_of(self, runtime: Runtime) -> ServiceAnswers:
        """The answers for ``runtime``, made the first time it serves a request (a server
        opens one runtime; a test's app may open several in turn)."""
        made = self._answers
        if made is None or made[0] is not runtime:
            made = self._answers = (runtime, answers_for(runtime))
        return made[1]

    def _charge(self, scope: Scope, budget: RequestBudget) -> BodyCharge:
        """The request's share of ``budget``, from its declared length and encoding."""
        declared = header_length = None
        compressed = False
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"inference-header-content-length" and value.isdigit():
                header_length = int(value)
            elif name == b"content-encoding" and value != b"identity":
                compressed = True
        return BodyCharge(budget, declared, self._limit, header_length, compressed=compressed)

    async def _admitted(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        model: str,
        version: str | None,
        answers: ServiceAnswers,
        charge: BodyCharge,
    ) -> None:
        declared = encoding = header_text = cache_control = accept = presented = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                declared = value
            elif name == b"inference-header-content-length":
                header_text = value
            elif name == b"content-encoding":
                encoding = value
            elif name == b"cache-control":
                cache_control = value
            elif name == b"accept-encoding":
                accept = value
            elif name == self.restricted_header:
                presented = value
        try:
            if self._restriction is not None and not self.admits(presented):
                raise RestrictedApiError(refusal_message(self._restriction))
            directives = directives_from(_text(cache_control))
            header_length, bad_header = _header_length(header_text)
            # A bad header length is refused once the body is in (as the body limit comes first).
            hasher = None
            if bad_header is None:
                hasher = answers.hasher(model, version, header_length, directives)
            # A plain body is hashed piece by piece as it comes; a compressed one once inflated
            # (its digest is the plain body's).
            plain = encoding is None or encoding == b"identity"
            parts = await receive_parts(
                receive, _text(declared), self._limit, hasher if plain else None, charge
            )
            body = None
            if not plain:
                body = await inflate(parts, _text(encoding) or "", self._limit, charge)
            digest = None
            if hasher is not None:
                if body is not None:
                    hasher.update(body)
                started_ns = time.perf_counter_ns()
                digest = hasher.digest()
                found = answers.memoized(model, version, digest, started_ns)
                if found is not None:
                    await _send_memoized(send, found, accept)
                    return
            if body is None:
                body = joined(parts)
            if bad_header is not None:
                raise bad_header
        except ClientGoneError:
            return
        except ServingError as error:
            await _refuse(send, scope, error)
            return
        await self._answer(
            scope, receive, send, answers, (model, version, body, header_length, directives),
            digest, accept,
        )  # fmt: skip

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        answers: ServiceAnswers,
        request: tuple[str, str | None, bytes, int | None, CacheDirectives],
        digest: bytes | None,
        accept: bytes | None,
    ) -> None:
        """Everything but a memoized answer: the service's whole path, with a watch for the
        client hanging up once the request waits for a model."""
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
            outcome = await answers.answer(*request, on_wait, digest)
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise
            return  # the client has gone: nobody reads an answer
        except ServingError as error:
            await _refuse(send, scope, error)
            return
        except Exception as error:  # a bug: answered as the app's last-resort handler does
            await _refuse(send, scope, error)
            return
        finally:
            if watch is not None:
                watch.stop()
        await _send_answer(
            send, outcome.body, outcome.header_length, outcome.cache_status.value, accept
        )


async def _send_memoized(send: Send, found: MemoEntry, accept: bytes | None) -> None:
    headers = found.headers or []
    if accept is not None:  # compressed per request: the memo holds the plain response
        await _send_answer(send, found.body, header_length_of(headers), "hit-local", accept)
        return
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": found.body})


async def _send_answer(
    send: Send, body: bytes, header_length: int | None, cache_status: str, accept: bytes | None
) -> None:
    encoding = None
    if accept is not None:
        body, encoding = compress_for(accept.decode("latin-1"), body)
    headers = answer_headers(body, header_length, cache_status.encode())
    if encoding is not None:
        headers.append((b"content-encoding", encoding.encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _header_length(value: bytes | None) -> tuple[int | None, BadRequestError | None]:
    """The binary extension's header length, or the error to answer once the body is read
    (a body over the limit is refused first, as it always was)."""
    try:
        return parse_header_length(_text(value)), None
    except BadRequestError as error:
        return None, error


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


async def _refuse(send: Send, scope: Scope, error: Exception) -> None:
    """Answer ``error`` as every endpoint does (see ``errors``)."""
    answer = error_answer(error, "POST", scope["path"])
    headers = [
        (b"content-length", b"%d" % len(answer.body)),
        (b"content-type", _JSON),
        *answer.headers,
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
