"""gRPC on grpcio's synchronous server: memoized ``ModelInfer`` hits answered on its threads.

grpcio's asyncio server costs more per call than anything else on a cache hit: a server that
answers ``ModelInfer`` with canned bytes and does nothing else reaches about 60% of the rate of
grpcio's synchronous server with a few threads (``bash scripts/harness grpc_floor``). So where a
local tier can vouch for its answers (``--cache local`` or ``tiered``), gRPC is served by the
synchronous server, and a byte-identical repeat of a ``ModelInfer`` request whose last answer was
a local hit is answered on the server's thread from a memo of encoded responses
(``response_memo``): one digest of the request bytes, one memo lookup, the local entry's
liveness token confirmed (the local tier takes its own lock, and counts the hit as a lookup
does), the request queued for the ledger relay (``ledger_relay``), and the stored bytes sent with
``x-cache: hit-local``. Nothing of it waits for the event loop, nor wakes it: the loop writes the
queued hits down periodically and whenever statistics or metrics are read, so a client that
asks after its answer sees its request counted.

Everything else (a first sighting, a miss, ``cache-control`` metadata, shared memory, every other
method, streams) is the asyncio servicer's, run on the event loop through ``loop_bridge``, with
the same answers, errors, trailers and statistics as the asyncio server gives. The same
message size limits, restricted-protocol interceptor, TLS and port sharing apply.

A stream holds one of the server's threads for its life, and one thread of its own that waits
for its requests (``loop_bridge``); open streams are capped (``stream_cap``) and the server gets
that many threads on top of :data:`THREADS`, so unary calls keep :data:`THREADS` threads
whatever streams are open.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from concurrent import futures
from typing import Any, NamedTuple, cast

import grpc
from google.protobuf.message import DecodeError

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.errors import BadRequestError, ServingError
from cachefleet.runtime.grpc.decode import decode_infer_request, request_cost
from cachefleet.runtime.grpc.encode import encode_infer_response
from cachefleet.runtime.grpc.errors import translated
from cachefleet.runtime.grpc.handlers import Malformed, add_handlers, method_handlers
from cachefleet.runtime.grpc.hot_pool import HotThreadPool
from cachefleet.runtime.grpc.ledger_relay import Answered, LedgerRelay
from cachefleet.runtime.grpc.loop_bridge import LoopBridge, LoopContext
from cachefleet.runtime.grpc.messages import service_pb2
from cachefleet.runtime.grpc.response_memo import ResponseMemo, request_digest
from cachefleet.runtime.grpc.servicer import InferenceServicer, directives_of
from cachefleet.runtime.grpc.stream_cap import StreamCap
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.protocol.request import InferRequest
from cachefleet.runtime.service import InferAnswer

#: The server's threads for unary calls at most: each call holds one while it is answered, so
#: more than the concurrency a client drives; quick calls keep to the few most recently idle
#: ones (``hot_pool``). Streams get as many more as the stream cap admits.
THREADS = 32
_HIT_LOCAL = (("x-cache", "hit-local"),)
_SHARED = "shared_memory_region"


def serves(runtime: Runtime) -> bool:
    """Whether this server serves ``runtime``'s gRPC: where a local tier vouches for answers,
    and the runtime does not trace (the tracing interceptor is the asyncio server's)."""
    return runtime.settings.cache.mode in ("local", "tiered") and runtime.tracing is None


class _Pending(NamedTuple):
    """A ``ModelInfer`` for the loop, with its request bytes' digest when it may be memoized."""

    request: Any
    digest: bytes | None


class MemoizedInfer:
    """``ModelInfer`` on the server's threads (see the module)."""

    def __init__(
        self, runtime: Runtime, bridge: LoopBridge, memo: ResponseMemo, relay: LedgerRelay
    ) -> None:
        self._runtime = runtime
        self._service = runtime.service
        self._bridge = bridge
        self.memo = memo
        self._relay = relay

    def __call__(self, message: bytes, context: grpc.ServicerContext) -> bytes | None:
        started_ns = time.perf_counter_ns()
        metadata = context.invocation_metadata()
        digest = None
        if not any(key == "cache-control" for key, _ in metadata or ()):
            digest = request_digest(message)
            body = self._memoized(digest, started_ns)
            if body is not None:
                context.set_trailing_metadata(_HIT_LOCAL)
                return body
        stand_in = LoopContext(metadata)
        body = None
        with contextlib.suppress(grpc.aio.AbortError):
            pending = _Pending(_parsed(message), digest)
            body = self._bridge.wait(self._answer(pending, stand_in), context)
        stand_in.finish(context)
        return body

    def _memoized(self, digest: bytes, started_ns: int) -> bytes | None:
        """The memoized response for ``digest`` while its model and local entry live; the hit
        is counted by the token and handed to the relay."""
        found = self.memo.get(digest)
        if found is None:
            return None
        try:
            model = self._service.model(found.name, found.version or None)
        except ServingError:
            return None  # the loop's path refuses it, and counts the failure
        confirmed_ns = found.token.confirm(started_ns) if found.model is model else None
        if confirmed_ns is None:
            self.memo.discard(digest)  # stale: its entry or its model is gone
            return None
        self._relay.record(Answered(model, started_ns, confirmed_ns, time.perf_counter_ns()))
        return found.body

    @translated
    async def _answer(self, pending: _Pending, context: LoopContext) -> bytes:
        """The servicer's ``ModelInfer`` on the loop, encoded, and memoized when it was a local
        hit whose inputs and outputs are all in the messages (no shared memory)."""
        request, digest = pending
        if isinstance(request, Malformed):
            raise BadRequestError(f"malformed request message: {request.reason}")
        budget = self._runtime.budget
        cost = request_cost(request)
        if not budget.try_enter(cost):
            await budget.wait(cost)
        try:
            body, status = await self._service.answer(
                request.model_name,
                request.model_version or None,
                lambda config: self._decode(request, config),
                lambda answer: self._render(request, digest, answer),
                directives_of(context),  # type: ignore[arg-type]
                transport="grpc",
            )
        finally:
            budget.leave(cost)
        context.set_trailing_metadata((("x-cache", status),))
        return body

    def _decode(self, request: Any, config: ModelConfig) -> InferRequest:
        return decode_infer_request(request, config, self._runtime.shared_memory.for_request())

    def _render(self, request: Any, digest: bytes | None, answer: InferAnswer) -> tuple[bytes, str]:
        body: bytes = encode_infer_response(answer).SerializeToString()
        token = answer.local_entry
        if digest is not None and token is not None and not _uses_shared_memory(request):
            self.memo.put(
                digest, request.model_name, request.model_version, answer.model, token, body
            )
        return body, answer.cache_status.value


def _parsed(message: bytes) -> Any:
    try:
        return service_pb2.ModelInferRequest.FromString(message)
    except (DecodeError, ValueError, RuntimeError) as error:
        return Malformed(str(error) or type(error).__name__)


def _uses_shared_memory(request: Any) -> bool:
    return any(_SHARED in i.parameters for i in request.inputs) or any(
        _SHARED in o.parameters for o in request.outputs
    )


class _Bridged:
    """The servicer's methods as synchronous handler behaviours (see ``loop_bridge``)."""

    def __init__(self, servicer: InferenceServicer, bridge: LoopBridge) -> None:
        self._servicer = servicer
        self._bridge = bridge

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._servicer, name)
        if inspect.isasyncgenfunction(method):
            return self._bridge.streaming(method)
        return self._bridge.unary(method)


class ThreadedServer:
    """grpcio's synchronous server, its threads (the calls', and the streams' readers), and
    the ledger relay that writes down their hits while it serves: :meth:`start` and
    :meth:`stop` on the event loop."""

    def __init__(
        self,
        server: grpc.Server,
        pool: HotThreadPool,
        readers: futures.ThreadPoolExecutor,
        relay: LedgerRelay,
    ) -> None:
        self.server = server
        self.pool = pool
        self.readers = readers
        self.relay = relay

    def add_insecure_port(self, address: str) -> int:
        return self.server.add_insecure_port(address)

    def add_secure_port(self, address: str, credentials: grpc.ServerCredentials) -> int:
        return self.server.add_secure_port(address, credentials)

    async def start(self) -> None:
        self.server.start()
        self.relay.start()

    async def stop(self, grace: float) -> None:
        """Refuse new calls, let in-flight ones finish for up to ``grace`` seconds (the loop
        runs meanwhile: they may be waiting for it), then drain the relay a last time."""
        try:
            await asyncio.to_thread(self.server.stop(grace).wait)
        finally:
            self.pool.shutdown(wait=False)
            self.readers.shutdown(wait=False, cancel_futures=True)
            self.relay.stop()


async def threaded_server(
    runtime: Runtime, options: list[tuple[str, Any]], interceptors: list[Any], cap: StreamCap
) -> ThreadedServer:
    """The server, unstarted and without ports, admitting as many streams as ``cap``; call in
    the event loop it hands calls to."""
    loop = asyncio.get_running_loop()
    readers = futures.ThreadPoolExecutor(cap.limit, thread_name_prefix="grpc_stream_reader")
    bridge = LoopBridge(loop, readers)
    memo = ResponseMemo(runtime.settings.cache.local_size_bytes // 8)

    async def forget(name: str) -> None:
        memo.discard_model(name)

    runtime.control.on_release(forget)
    relay = LedgerRelay(loop, runtime.ledger, runtime.service)
    handlers = cap.threaded(method_handlers(_Bridged(InferenceServicer(runtime), bridge)))
    handlers["ModelInfer"] = grpc.unary_unary_rpc_method_handler(
        MemoizedInfer(runtime, bridge, memo, relay)
    )
    pool = HotThreadPool(THREADS + cap.limit, "grpc")
    # Typed as the standard pool, of which grpcio calls only ``submit``.
    executor = cast(futures.ThreadPoolExecutor, pool)
    server = grpc.server(executor, interceptors=interceptors, options=options)
    add_handlers(handlers, server)
    return ThreadedServer(server, pool, readers, relay)
