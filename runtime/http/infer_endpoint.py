"""The one infer endpoint: ``POST /v2/models/{m}[/versions/{v}]/infer`` as plain ASGI.

It is handed a request already described (``infer_request.InferHead``) and reads the ASGI
messages itself (no ``Request`` object, no exception machinery): the restriction's verdict, the
budget of requests and bytes in flight (admitted before a byte of the body is read), the body
within the limit (hashed for the memo piece by piece as it arrives, compared in those pieces
with the request a memo entry answers, and joined only for the model's path), a memo hit
answered and counted in one synchronous call with the headers kept with its entry, and
everything else through the service's answer; refusals through the one error mapping
(``errors``).
"""

from __future__ import annotations

import asyncio
import time

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from cachefleet.runtime.composition import Runtime, RuntimeSlot
from cachefleet.runtime.errors import BadRequestError, ServingError
from cachefleet.runtime.http.answer_charge import AnswerCharge
from cachefleet.runtime.http.body import ClientGoneError, inflate, joined, receive_parts
from cachefleet.runtime.http.body_charge import BodyCharge
from cachefleet.runtime.http.client_watch import ClientWatch
from cachefleet.runtime.http.compression import compress_for
from cachefleet.runtime.http.errors import error_answer
from cachefleet.runtime.http.infer_answers import ServiceAnswers, answers_for
from cachefleet.runtime.http.infer_codec import answer_headers, header_length_of
from cachefleet.runtime.http.infer_request import InferHead
from cachefleet.runtime.http.json_limit import check_json_size, json_size
from cachefleet.runtime.http.restricted import RestrictedApiError
from cachefleet.runtime.service.memo_answers import MemoEntry, MemoKey

_JSON = b"application/json"
_START = "http.response.start"
_BODY = "http.response.body"


class InferEndpoint:
    """Answers described infer requests (:meth:`serve`); the server's one infer handler."""

    def __init__(self, slot: RuntimeSlot) -> None:
        self._slot = slot
        self._limit = slot.settings.server.max_request_bytes
        self._json_limit = slot.settings.server.max_json_bytes
        #: The runtime the answers below were made for, and those answers.
        self._answers: tuple[Runtime, ServiceAnswers] | None = None

    async def serve(self, head: InferHead, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the infer request that ``head`` describes.

        Admit it (a count, and the bytes of its body's first step, against the budget) before
        a byte of its body is read, answer it (its share growing with what it holds: see
        ``body_charge``), and give its share back; its answer's bytes stay charged until they
        are written (``answer_charge``). Its JSON is refused over ``--max-json-size`` as soon
        as its head says so (``json_limit``)."""
        try:
            runtime = self._slot.ready()
            self._check_head(head)
            charge = self._charge(head, runtime)
            budget = runtime.budget
            cost = charge.opening_cost()
            if not budget.try_enter(cost):
                await budget.wait(cost)
        except ServingError as error:  # not loaded yet, restricted, or over the budget
            await refuse(send, head, error)
            return
        charge.taken = cost
        answer = AnswerCharge(budget)
        try:
            await self._admitted(
                head, scope, receive, send, self._answers_of(runtime), charge, answer
            )
        except BaseException:
            answer.release()
            raise
        finally:
            budget.leave(charge.taken)
        await answer.release_when_written(scope)

    def answer_now(
        self, head: InferHead, parts: list[bytes]
    ) -> tuple[MemoEntry, AnswerCharge] | None:
        """The memo's answer to ``head``'s request, whose plain body came whole in ``parts``,
        counted as :meth:`serve` counts it, when it can be given at once: admitted without a
        wait, memoized and live; with the charge to hold its bytes in until they are written.
        None, nothing counted, when not: :meth:`serve` then answers the request (or refuses
        it), deciding nothing again that was decided here: a request the memo was asked about
        keeps the key it was looked up by (``InferHead.memo_key``), or word that the memo
        holds nothing of its model (``InferHead.memo_passed``), so that :meth:`serve` neither
        hashes its body nor looks it up (nor counts its miss) a second time. For the HTTP
        protocol, which reads below ASGI (``uvicorn_protocol``) and decides nothing of its
        own."""
        try:
            runtime = self._slot.ready()
            self._check_head(head)  # refused before the memo is asked, as serve refuses it
            answers = self._answers_of(runtime)
            memo_scope = answers.scope(head)
            if memo_scope is None:  # no memo, or not for this request: nothing to admit
                return None
            budget = runtime.budget
            cost = self._charge(head, runtime).opening_cost()
            if not budget.try_enter(cost):
                budget.leave(0)  # counted by try_enter; serve waits for room instead
                return None
        except ServingError:
            return None
        try:
            hasher = answers.hasher(memo_scope)
            for part in parts:
                hasher.update(part)
            started_ns = time.perf_counter_ns()
            found, key = answers.memoized(memo_scope, hasher.digest(), parts, started_ns)
            if found is None:
                head.memo_key = key  # looked up: serve neither hashes nor looks up again
                return None
            return found, AnswerCharge(budget)
        finally:
            budget.leave(cost)

    def _check_head(self, head: InferHead) -> None:
        """ServingError when ``head`` alone refuses its request, before a byte of its body is
        read (restricted, or JSON over ``--max-json-size``)."""
        if head.refusal is not None:
            raise RestrictedApiError(head.refusal)
        if head.header_length is not None:
            check_json_size(head.header_length, self._json_limit)
        elif head.declared is not None and head.encoding is None:
            check_json_size(head.declared, self._json_limit)

    def _charge(self, head: InferHead, runtime: Runtime) -> BodyCharge:
        """``head``'s request's charge against the budget, before a byte of its body is read."""
        return BodyCharge(
            runtime.budget, head.declared, self._limit, head.header_length,
            compressed=head.encoding is not None,
        )  # fmt: skip

    def _answers_of(self, runtime: Runtime) -> ServiceAnswers:
        """The answers for ``runtime``, made the first time it serves a request (a server
        opens one runtime; a test's app may open several in turn)."""
        made = self._answers
        if made is None or made[0] is not runtime:
            made = self._answers = (runtime, answers_for(runtime))
        return made[1]

    async def _admitted(
        self,
        head: InferHead,
        scope: Scope,
        receive: Receive,
        send: Send,
        answers: ServiceAnswers,
        charge: BodyCharge,
        answer: AnswerCharge,
    ) -> None:
        try:
            key = head.memo_key  # set when answer_now asked the memo already
            memo_scope = None if key is not None else answers.scope(head)
            hasher = None if memo_scope is None else answers.hasher(memo_scope)
            # A plain body is hashed piece by piece as it comes; a compressed one once inflated
            # (its digest is the plain body's).
            plain = head.encoding is None
            parts = await receive_parts(
                receive, head.declared, self._limit, hasher if plain else None, charge
            )
            if not plain:
                parts = [await inflate(parts, head.encoding or "", self._limit, charge)]
            if hasher is not None:
                assert memo_scope is not None  # a hasher is made only for a scope
                if not plain:
                    hasher.update(parts[0])
                started_ns = time.perf_counter_ns()
                found, key = answers.memoized(memo_scope, hasher.digest(), parts, started_ns)
                if found is not None:
                    headers = found.headers or []
                    if head.accept is None:
                        answer.hold(found.body)
                        await send({"type": _START, "status": 200, "headers": headers})
                        await send({"type": _BODY, "body": found.body})
                    else:  # compressed per request: the memo holds the plain answer
                        length = header_length_of(headers)
                        await _send_answer(
                            send, found.body, length, found.status, head.accept, answer
                        )
                    return
            body = joined(parts)
            if head.bad_header is not None:
                raise BadRequestError(head.bad_header)
            check_json_size(json_size(len(body), head.header_length), self._json_limit)
            await charge.decoding(len(body))  # before the decode, now that its size is known
        except ClientGoneError:
            return
        except ServingError as error:
            await refuse(send, head, error)
            return
        await self._answer(head, scope, receive, send, answers, body, key, answer)

    async def _answer(
        self,
        head: InferHead,
        scope: Scope,
        receive: Receive,
        send: Send,
        answers: ServiceAnswers,
        body: bytes,
        key: MemoKey | None,
        answer: AnswerCharge,
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
            outcome = await answers.answer(head, body, on_wait, key)
        except asyncio.CancelledError:
            if watch is None or not watch.absorb():
                raise
            return  # the client has gone: nobody reads an answer
        except Exception as error:  # a ServingError, or a bug: answered by the one mapping
            await refuse(send, head, error)
            return
        finally:
            if watch is not None:
                watch.stop()
        await _send_answer(
            send,
            outcome.body,
            outcome.header_length,
            outcome.cache_status.value,
            head.accept,
            answer,
        )


async def _send_answer(
    send: Send,
    body: bytes,
    header_length: int | None,
    cache_status: str,
    accept: str | None,
    answer: AnswerCharge,
) -> None:
    encoding = None
    if accept is not None:
        body, encoding = compress_for(accept, body)
    answer.hold(body)
    headers = answer_headers(body, header_length, cache_status.encode())
    if encoding is not None:
        headers.append((b"content-encoding", encoding.encode()))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def refuse(send: Send, head: InferHead, error: Exception) -> None:
    """Answer ``head``'s request with ``error``, as every endpoint does (see ``errors``)."""
    await refuse_request(send, head.method, head.path, error)


async def refuse_request(send: Send, method: str, path: str, error: Exception) -> None:
    """Answer the request ``method path`` with ``error`` (see ``errors``), without the app."""
    answer = error_answer(error, method, path)
    headers = [
        (b"content-length", b"%d" % len(answer.body)),
        (b"content-type", _JSON),
        *answer.headers,
    ]
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body})
