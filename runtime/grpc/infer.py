"""``ModelInfer`` and ``ModelStreamInfer``: the one way the gRPC server answers inference.

Both run on the server's threads (a stream on a thread of its own, see ``server``) and answer
each request through :meth:`Inference.answer` on the event loop (``loop_bridge``): admitted
against the request budget once, then the service's ``answer``, the same path as HTTP's, so
both transports share the models, the cache (one entry for the same tensors), single-flight and
the request ledger. How the cache answered goes back as ``x-cache`` trailing metadata, the gRPC
counterpart of the ``X-Cache`` header (trailing: it rides on the status, where initial metadata
costs one more message per call); ``cache-control`` request metadata opts out as the header does.

``ModelInfer`` takes the request's bytes as they arrived. Where the runtime has the answer
memo (``cache.memo``: a local tier vouches for answers, ``--cache local`` or ``tiered``) and
the call carries no ``cache-control``, a byte-identical repeat of a request whose last answer
was a local hit is answered on the call's thread: one digest of the bytes, one memo lookup, the
request written down in the ledger (in flight first, so an unload waits for it, then the model
and the local entry confirmed: the local tier counts the hit as a lookup does), and the stored
bytes sent with ``x-cache: hit-local``. The event loop does nothing for it. Everything else goes
to the loop as bytes, is admitted against the request budget for what its bytes will hold
(``decode.message_cost``) before it is parsed once (``handlers.parsed``), and is answered there;
a local hit that went through no shared memory is memoized for the next repeat.

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
from typing import Any, TypeVar, cast

import grpc

from cachefleet.runtime.cache.api import CacheDirectives, CacheStatus
from cachefleet.runtime.cache.memo import MemoEntry, MemoKey, ResponseMemo
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
from cachefleet.runtime.models.types import Model, ModelConfig
from cachefleet.runtime.protocol import directives_from
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.service import InferAnswer

Rendered = TypeVar("Rendered")
_HIT_LOCAL = (("x-cache", "hit-local"),)
_SHARED = "shared_memory_region"
_CACHE_CONTROL = "cache-control"


class Inference:
    """The inference methods' behaviours on the server's threads (see the module)."""

    def __init__(self, runtime: Runtime, bridge: LoopBridge) -> None:
        self._runtime = runtime
        self._service = runtime.service
        self._ledger = runtime.ledger
        self._bridge = bridge
        self._memo = runtime.memo

    def ModelInfer(self, message: bytes, context: grpc.ServicerContext) -> bytes | None:
        started_ns = time.perf_counter_ns()
        metadata = context.invocation_metadata()
        memo_key = None
        if self._memo is not None and not any(key == _CACHE_CONTROL for key, _ in metadata or ()):
            memo_key = self._memo.grpc_key(message)
            body = self._memoized(self._memo, memo_key, started_ns)
            if body is not None:
                context.set_trailing_metadata(_HIT_LOCAL)
                return body
        answered: bytes | None = self._bridge.call(
            lambda message, stand_in: self._infer(message, memo_key, stand_in), message, context
        )
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
    async def _infer(self, message: bytes, memo_key: MemoKey | None, context: LoopContext) -> bytes:
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

            def render(answer: InferAnswer) -> tuple[bytes, str]:
                body: bytes = encode_infer_response(answer).SerializeToString()
                token = answer.local_entry
                if memo_key is not None and token is not None and not _uses_shared_memory(request):
                    assert self._memo is not None  # a key is made only with a memo
                    entry = MemoEntry(
                        body, answer.model, token, request.model_name, request.model_version
                    )
                    self._memo.insert(memo_key, entry)
                return body, answer.cache_status.value

            directives = directives_of(context.invocation_metadata())
            body, status = await self._answered(request, directives, render)
        finally:
            budget.leave(cost)
        context.set_trailing_metadata((("x-cache", status),))
        return body

    def _memoized(self, memo: ResponseMemo, key: MemoKey, started_ns: int) -> bytes | None:
        """The memoized answer to ``key``'s request, written down in the ledger, while its
        model and local entry live; else None (and a stale entry is dropped)."""
        found = memo.lookup(key)
        if found is None:
            return None
        # In flight first, so that an unload waits for it; then the model is checked. The memo
        # keeps the model object the entry was rendered for (typed as an object in ``cache``).
        passage = self._ledger.open(cast(Model, found.model), "grpc", started_ns)
        try:
            model = self._service.model(found.name, found.version or None)
        except ServingError:
            model = None  # the loop's path refuses it, and counts the failure
        confirmed_ns = found.token.confirm(started_ns) if found.model is model else None
        if confirmed_ns is None:
            self._ledger.abandoned(passage)
            memo.delete(key)  # stale: its entry or its model is gone
            return None
        passage.cache_status = CacheStatus.HIT_LOCAL
        passage.cache_ns = confirmed_ns - started_ns
        self._ledger.succeeded(passage)
        return found.body


def directives_of(metadata: Any) -> CacheDirectives:
    """The call's ``cache-control`` metadata as cache directives."""
    for key, value in metadata or ():
        if key == _CACHE_CONTROL:
            return directives_from(value if isinstance(value, str) else value.decode())
    return directives_from(None)


def _message(answer: InferAnswer) -> tuple[Any, str]:
    return encode_infer_response(answer), answer.cache_status.value


def _uses_shared_memory(request: Any) -> bool:
    return any(_SHARED in i.parameters for i in request.inputs) or any(
        _SHARED in o.parameters for o in request.outputs
    )
