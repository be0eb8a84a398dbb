"""``ModelInfer`` and ``ModelStreamInfer``: the one way the gRPC server answers inference.

Both run on the server's threads (a stream on a thread of its own, see ``server``) and answer
each request through :meth:`Inference.answer` on the event loop (``loop_bridge``): admitted
against the request budget, then the service's ``answer``, the same path as HTTP's, so
both transports share the models, the cache (one entry for the same tensors), single-flight and
the request ledger. How the cache answered goes back as ``x-cache`` trailing metadata, the gRPC
counterpart of the ``X-Cache`` header (trailing: it rides on the status, where initial metadata
costs one more message per call); ``cache-control`` request metadata opts out as the header does.

``ModelInfer`` takes the request's bytes as they arrived and scans the call's metadata once (its
``cache-control``, as the cache directives). Where the runtime has the answer memo (``--cache
local`` or ``tiered``) and the directives let it answer (the service's one rule, HTTP's too: not
``no-cache`` nor ``no-store``), the call is answered from the memo on its own thread, as the
service serves it to both transports (``service.memo_answers``), gRPC supplying only its scope
and the message: admitted against the request budget first, as HTTP admits a request before it
reads its body (one of the requests in flight, charged for what its bytes will hold:
``decode.message_cost``), then the lookup, in flight, the model and the local entry confirmed,
counted, and the place given back; a hit is sent with its entry's hit status as ``x-cache``
(``hit-local``), and the event loop does nothing for it. Everything else goes to the loop as
bytes (a place in the budget never crosses threads, so a call cancelled before the loop runs it
holds none), is admitted there, parsed once (``handlers.parsed``), charged for its typed contents
and answered; a local hit that went through no shared memory is kept for the next repeat by the
service's one memoizing render.

grpcio inflates a compressed message whole before the handler sees it, and refuses one whose
inflated size is over ``grpc.max_receive_message_length`` (``--max-request-size``) with
``RESOURCE_EXHAUSTED``; so a message reaches the budget at its inflated size, at most the size
limit, and at most one per thread of the server's pools is held before it is charged.

A stream answers its requests in order, one at a time; a failed request answers with its error
message in band and the stream goes on, as Triton's stream does for models that are not
decoupled.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TypeVar

import grpc

from cachefleet.runtime.cache.api import CacheDirectives
from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc.decode import (
    decode_infer_request,
    message_cost,
    request_cost,
    typed_cost,
)
from cachefleet.runtime.grpc.encode import encode_infer_response
from cachefleet.runtime.grpc.errors import error_status, translated
from cachefleet.runtime.grpc.handlers import checked, parsed
from cachefleet.runtime.grpc.loop_bridge import LoopBridge, LoopContext
from cachefleet.runtime.grpc.messages import service_pb2
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol import directives_from
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.service import InferAnswer, Renderer
from cachefleet.runtime.service.memo_answers import Kept, MemoKey

Rendered = TypeVar("Rendered")
_CACHE_CONTROL = "cache-control"
#: gRPC's scope in the memo: its domain; the message itself names the model and version.
SCOPE = b"cachefleet.memo.grpc3"


class Inference:
    """The inference methods' behaviours on the server's threads (see the module)."""

    def __init__(self, runtime: Runtime, bridge: LoopBridge) -> None:
        self._runtime = runtime
        self._service = runtime.service
        self._bridge = bridge
        self._memo = runtime.memo_answers
        # What a memo hit calls, bound once (the runtime's parts live as long as the server):
        # the hit is the cheapest answer there is, and attribute chains are much of its cost.
        budget = runtime.budget
        self._enter = budget.enter_from_thread
        self._leave = budget.leave_from_thread

    def ModelInfer(self, message: bytes, context: grpc.ServicerContext) -> bytes | None:
        started_ns = time.perf_counter_ns()
        directives = directives_of(context.invocation_metadata())
        memo = self._memo
        key = None
        if memo is not None and memo.applies(directives):
            key = memo.key_of(SCOPE, message)
            cost = message_cost(len(message))
            try:
                entered = self._enter(cost)
            except ServingError as error:
                _abort(context, error)
            if entered:  # else its bytes do not fit now: the loop waits for room
                try:
                    found = memo.hit(key, "grpc", started_ns)
                finally:
                    self._leave(cost)
                if found is not None:
                    context.set_trailing_metadata((("x-cache", found.status.value),))
                    return found.body

        def infer(message: bytes, stand_in: LoopContext) -> Any:
            return self._infer(message, key, directives, stand_in)

        answered: bytes | None = self._bridge.call(infer, message, context)
        return answered

    def ModelStreamInfer(
        self, requests: Iterator[Any], context: grpc.ServicerContext
    ) -> Iterator[Any]:
        directives = directives_of(context.invocation_metadata())
        for request in requests:
            try:
                work = self.answer(checked(request), directives, _message)
                response, _ = self._bridge.wait(work, context)
            except Exception as error:  # said in band: the stream goes on for the other requests
                if not context.is_active():  # cancelled meanwhile: nobody reads an answer
                    return
                _, message = error_status(error, "ModelStreamInfer")
                yield service_pb2.ModelStreamInferResponse(error_message=message)
                continue
            yield service_pb2.ModelStreamInferResponse(infer_response=response)

    async def answer(
        self,
        request: Any,
        directives: CacheDirectives,
        render: Callable[[InferAnswer], tuple[Rendered, str]],
    ) -> tuple[Rendered, str]:
        """On the loop: a parsed ``request`` answered by the service and ``render``-ed,
        admitted against the request budget (as HTTP's are) for as long as it is answered."""
        budget = self._runtime.budget
        cost = request_cost(request)
        if not budget.try_enter(cost):
            await budget.wait(cost)
        try:
            return await self._answered(request, directives, render)
        finally:
            budget.leave(cost)

    async def _answered(
        self,
        request: Any,
        directives: CacheDirectives,
        render: Callable[[InferAnswer], tuple[Rendered, str]],
    ) -> tuple[Rendered, str]:
        shared_memory = self._runtime.shared_memory

        def decode(config: ModelConfig) -> InferRequest:
            return decode_infer_request(request, config, shared_memory.for_request())

        return await self._service.answer(
            request.model_name,
            request.model_version or None,
            decode,
            render,
            directives,
            transport="grpc",
        )

    @translated
    async def _infer(
        self,
        message: bytes,
        memo_key: MemoKey | None,
        directives: CacheDirectives,
        context: LoopContext,
    ) -> bytes:
        """``ModelInfer`` on the loop: admitted for the copies of its bytes before it is
        parsed (``decode.message_cost``: a compressed message arrives inflated, and is charged
        so), then parsed, answered, encoded, and memoized when ``memo_key`` is given."""
        budget = self._runtime.budget
        cost = message_cost(len(message))
        if not budget.try_enter(cost):
            await budget.wait(cost)
        try:
            request = checked(parsed(service_pb2.ModelInferRequest, message))
            extra = typed_cost(request)
            if extra:
                if cost + extra > budget.max_bytes:
                    raise budget.over_budget(cost + extra)
                if not budget.try_take(extra):
                    await budget.take(extra)
                cost += extra
            render: Renderer[tuple[bytes, str]] = _encoded
            if memo_key is not None:
                assert self._memo is not None  # a key is made only with a memo
                render = self._memo.memoizing(
                    memo_key, request.model_name, request.model_version, render, _kept
                )
            body, status = await self._answered(request, directives, render)
        finally:
            budget.leave(cost)
        context.set_trailing_metadata((("x-cache", status),))
        return body


def directives_of(metadata: Any) -> CacheDirectives:
    """The call's ``cache-control`` metadata as cache directives."""
    for key, value in metadata or ():
        if key == _CACHE_CONTROL:
            return directives_from(value if isinstance(value, str) else value.decode())
    return directives_from(None)


def _message(answer: InferAnswer) -> tuple[Any, str]:
    return encode_infer_response(answer), answer.cache_status.value


def _encoded(answer: InferAnswer) -> tuple[bytes, str]:
    body: bytes = encode_infer_response(answer).SerializeToString()
    return body, answer.cache_status.value


def _kept(rendered: tuple[bytes, str]) -> Kept:
    """What the memo keeps of an encoded answer: its bytes (the trailer is always the same)."""
    return rendered[0], None


def _abort(context: grpc.ServicerContext, error: ServingError) -> NoReturn:
    """End the call with ``error``'s status, as the loop's methods end theirs (``errors``)."""
    context.abort(*error_status(error, "ModelInfer"))
    raise AssertionError("grpc's abort raises")
