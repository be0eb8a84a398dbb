"""The request path, module by module, in process on a real runtime (ONNX Runtime, the local
tier, the memo, the ledger): the infer route's description (``http.infer_request``), the HTTP
endpoint (``http.infer_endpoint``) and the routed endpoints (``http.routes``) driven through
ASGI, gRPC inference (``grpc.infer``) and the other gRPC methods (``grpc.servicer``) with a
stand-in for grpcio's servicer context, and the service (``service.inference``,
``service.memo_answers``). Memo tests read the memo's own figures: a memo that answered
nothing fails them, though its answers would be the same."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import grpc
import numpy as np
import pytest
from support.sample_requests import binary_body
from tritonclient.grpc import service_pb2

from cachefleet.runtime.cache.api import CacheDirectives, CacheStatus, LocalEntryToken
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.composition import Runtime, RuntimeSlot
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.errors import ModelNotFoundError
from cachefleet.runtime.grpc.infer import SCOPE, Inference, directives_of
from cachefleet.runtime.grpc.loop_bridge import Aborted, LoopBridge, LoopContext
from cachefleet.runtime.grpc.servicer import InferenceServicer
from cachefleet.runtime.http.app import create_app
from cachefleet.runtime.http.infer_answers import _kept as http_kept
from cachefleet.runtime.http.infer_codec import InferOutcome
from cachefleet.runtime.http.infer_endpoint import InferEndpoint
from cachefleet.runtime.http.infer_request import InferHeads, infer_route
from cachefleet.runtime.http.restricted import ApiGuard
from cachefleet.runtime.http.routes import build_routes
from cachefleet.runtime.protocol import InferRequest
from cachefleet.runtime.service import DecodeInThread
from cachefleet.runtime.service.inference import InferAnswer
from cachefleet.runtime.tensor import Tensor

Message = dict[str, Any]


def settings(repository: Path, **limits: Any) -> RuntimeSettings:
    return RuntimeSettings.model_validate(
        {"models": {"repository": str(repository), "load_models": ["simple"],
                    "control_mode": "explicit"},
         "cache": {"mode": "local", "admission": "always"},
         "limits": limits,
         "security": {"http_restricted_api": [
             {"groups": ["model-repository"], "header": "admin-key", "value": "s3cret"}]}}
    )  # fmt: skip


@asynccontextmanager
async def opened(repository: Path, **limits: Any) -> AsyncIterator[tuple[Runtime, Any]]:
    """A runtime on ``simple`` and the HTTP app over it."""
    chosen = settings(repository, **limits)
    async with Runtime.open(chosen) as runtime:
        slot = RuntimeSlot(chosen, runtime)
        yield runtime, create_app(slot)


def simple_body() -> tuple[bytes, int]:
    body, json_size = binary_body("simple")
    assert json_size is not None  # binary inputs: a JSON header, then the tensors
    return body, json_size


def scope(path: str, headers: list[tuple[bytes, bytes]], method: str = "POST") -> Message:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": method, "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "headers": headers,
            "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}  # fmt: skip


async def call(app: Any, request: Message, pieces: list[bytes]) -> tuple[int, dict[bytes, bytes], bytes]:  # fmt: skip  # noqa: E501
    """Drive ``app`` through ASGI with a body in ``pieces``: status, headers, body."""
    queue = [
        {"type": "http.request", "body": piece, "more_body": index < len(pieces) - 1}
        for index, piece in enumerate(pieces)
    ]
    sent: list[Message] = []

    async def receive() -> Message:
        if queue:
            return queue.pop(0)
        await asyncio.Event().wait()  # the client neither sends nor leaves
        raise AssertionError("unreachable")

    async def send(message: Message) -> None:
        sent.append(message)

    await app(request, receive, send)
    start = sent[0]
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], dict(start["headers"]), body


def infer_headers(body: bytes, json_size: int, *extra: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:  # fmt: skip  # noqa: E501
    return [
        (b"content-length", b"%d" % len(body)),
        (b"inference-header-content-length", b"%d" % json_size),
        *extra,
    ]


def test_infer_routes_and_heads_are_read_once() -> None:
    assert infer_route("/v2/models/simple/infer") == ("simple", None)
    assert infer_route("/v2/models/simple/versions/3/infer") == ("simple", "3")
    for path in ("/v2/models//infer", "/v2/models/a/b/infer", "/v2/models/a/versions//infer",
                 "/v2/models/simple/infer/more", "/v2/health/live"):  # fmt: skip
        assert infer_route(path) is None, path
    guard = ApiGuard(
        RuntimeSettings.model_validate(
            {"security": {"http_restricted_api": [
                {"groups": ["inference"], "header": "Infer-Key", "value": "k"}]}}
        ).security.http_restricted_api
    )  # fmt: skip
    heads = InferHeads(guard)
    head = heads(scope("/v2/models/m/versions/2/infer", [
        (b"content-length", b"12"), (b"inference-header-content-length", b"x"),
        (b"infer-key", b"k"), (b"infer-key", b"other"), (b"cache-control", b"max-age=5"),
    ]))  # fmt: skip
    assert head is not None
    assert (head.model, head.version, head.declared, head.header_length) == ("m", "2", 12, None)
    assert head.bad_header is not None  # refused once the body is in
    assert head.refusal is None  # the first header of the name is the one judged
    assert not head.memo  # an unsound header length never reaches the memo
    refused = heads(scope("/v2/models/m/infer", [(b"content-length", b"\xc2\xb2")]))
    assert refused is not None
    assert refused.declared is None  # not a decimal number: no length, never a crash
    assert refused.refusal == "This API is restricted, expecting header 'Infer-Key'"
    for directive, memo in ((b"no-cache", False), (b"no-store", False), (b"max-age=0", True)):
        described = heads(scope("/v2/models/m/infer", [(b"cache-control", directive)]))
        assert described is not None
        assert described.memo is memo, directive
    assert heads(scope("/v2/health/live", [], "GET")) is None


async def test_the_http_endpoint_answers_from_the_memo(model_repository: Path) -> None:
    body, json_size = simple_body()
    path = "/v2/models/simple/infer"
    async with opened(model_repository) as (runtime, app):
        assert runtime.memo is not None
        answers = [await call(app, scope(path, infer_headers(body, json_size)), [body])
                   for _ in range(3)]  # fmt: skip
        assert [a[1][b"x-cache"] for a in answers] == [b"miss", b"hit-local", b"hit-local"]
        assert runtime.memo.figures().hits == 1  # the memo answered the third
        pieces = [body[:7], body[7:100], body[100:]]
        split = await call(app, scope(path, infer_headers(body, json_size)), pieces)
        assert split[2] == answers[0][2]
        assert split[1][b"x-cache"] == b"hit-local"
        assert runtime.memo.figures().hits == 2  # compared piece by piece, not joined
        bypass = await call(
            app, scope(path, infer_headers(body, json_size, (b"cache-control", b"no-cache"))),
            [body],
        )  # fmt: skip
        assert bypass[1][b"x-cache"] == b"bypass"
        assert bypass[2] == answers[0][2]
        assert runtime.memo.figures().hits == 2
        stats = runtime.service.statistics("simple")["model_stats"][0]["inference_stats"]
        assert (stats["success"]["count"], stats["cache_hit"]["count"]) == (5, 3)
        assert runtime.budget.requests == 0
        assert runtime.budget.bytes == 0
        endpoint = InferEndpoint(RuntimeSlot(runtime.settings, runtime))
        assert endpoint.serve is not None


async def test_an_http_memo_hit_takes_its_place_in_the_budget(model_repository: Path) -> None:
    body, json_size = simple_body()
    path = "/v2/models/simple/infer"
    async with opened(model_repository, max_requests_in_flight=1) as (runtime, app):
        for _ in range(2):
            await call(app, scope(path, infer_headers(body, json_size)), [body])
        assert runtime.budget.try_enter(0)  # another request holds the only place
        try:
            status, _, answer = await call(app, scope(path, infer_headers(body, json_size)), [body])  # fmt: skip  # noqa: E501
        finally:
            runtime.budget.leave(0)
        assert status == 503
        assert b"--max-requests-in-flight" in answer


async def test_routed_endpoints_are_guarded_by_the_one_guard(model_repository: Path) -> None:
    async with opened(model_repository) as (runtime, app):
        guard = ApiGuard(runtime.settings.security.http_restricted_api)
        assert len(build_routes(RuntimeSlot(runtime.settings, runtime), guard)) > 10
        status, _, _ = await call(app, scope("/v2/models/simple", [], "GET"), [b""])
        assert status == 200
        index = "/v2/repository/index"
        assert (await call(app, scope(index, []), [b""]))[0] == 403
        admitted = await call(app, scope(index, [(b"admin-key", b"s3cret")]), [b""])
        assert admitted[0] == 200
        assert b"simple" in admitted[2]


class FakeContext:
    """What ``grpc.infer`` uses of grpcio's servicer context."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self._metadata = metadata
        self.trailing: Any = None
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> Any:
        return self._metadata

    def set_trailing_metadata(self, metadata: Any) -> None:
        self.trailing = metadata

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return True

    def is_active(self) -> bool:
        return True

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.aborted = (code, details)
        raise RuntimeError(details)  # as grpcio's abort, it ends the behaviour


def grpc_message() -> bytes:
    request = service_pb2.ModelInferRequest(model_name="simple", id="g")
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        request.raw_input_contents.append(np.full(16, 4, dtype=np.int32).tobytes())
    data: bytes = request.SerializeToString()
    return data


async def test_grpc_inference_answers_from_the_same_memo(model_repository: Path) -> None:
    message = grpc_message()
    async with opened(model_repository, max_requests_in_flight=1) as (runtime, _):
        assert runtime.memo is not None
        inference = Inference(runtime, LoopBridge(asyncio.get_running_loop()))

        async def infer(*metadata: tuple[str, str]) -> tuple[bytes | None, FakeContext]:
            context = FakeContext(metadata)
            stand_in: Any = context  # what grpc.infer uses of a ServicerContext, and no more
            answer = await asyncio.to_thread(inference.ModelInfer, message, stand_in)
            return answer, context

        statuses = []
        for _ in range(3):
            _answer, context = await infer()
            statuses.append(dict(context.trailing)["x-cache"])
        assert statuses == ["miss", "hit-local", "hit-local"]
        assert runtime.memo.figures().hits == 1  # the third was the memo's, on the thread
        assert runtime.memo.key_of(SCOPE, message).request == (SCOPE, message)
        # One rule for both transports: no-cache skips the memo, another directive does not.
        _, context = await infer(("cache-control", "no-cache"))
        assert dict(context.trailing)["x-cache"] == "bypass"
        # no-cache stored the answer again, a new local entry: the memo's entry is stale once,
        # kept again, and then answers whatever other directive the call carries.
        for _ in range(2):
            _, context = await infer(("cache-control", "max-age=5"))
            assert dict(context.trailing)["x-cache"] == "hit-local"
        assert runtime.memo.figures().hits == 2
        # A memo hit is one of the requests in flight, as on HTTP.
        assert runtime.budget.try_enter(0)
        try:
            with pytest.raises(RuntimeError):
                await infer()
        finally:
            runtime.budget.leave(0)
        assert runtime.memo.figures().hits == 2
        stats = runtime.service.statistics("simple")["model_stats"][0]["inference_stats"]
        assert (stats["success"]["count"], stats["cache_hit"]["count"]) == (6, 4)
        assert runtime.budget.requests == 0
        assert runtime.budget.bytes == 0
        assert directives_of((("cache-control", b"no-store"),)) == CacheDirectives(False, False)


async def test_a_memo_hit_reports_the_tier_its_entry_was_made_from(
    model_repository: Path,
) -> None:
    """The memo names no tier: a hit reports the status of the answer its entry was kept
    from, so an in-process tier of another name is reported as itself on every transport."""
    message = grpc_message()
    nearby = CacheStatus.hit("nearby")  # an in-process tier that is not ``local``
    async with opened(model_repository) as (runtime, _):
        answers = runtime.memo_answers
        assert answers is not None
        model = runtime.service.model("simple", None)
        token = LocalEntryToken(
            CacheKey("simple", "1", bytes(32)), object(), lambda key, identity, at: at
        )
        shareable: Any = SimpleNamespace(shareable=True)  # what the memoizing render reads
        answer = InferAnswer(model, shareable, [], nearby, token)
        render = answers.memoizing(
            answers.key_of(SCOPE, message), "simple", None, lambda a: b"kept", lambda b: (b, None)
        )
        assert render(answer) == b"kept"
        found = answers.hit(answers.key_of(SCOPE, message), "grpc", time.perf_counter_ns())
        assert found is not None
        assert found.status is nearby
        context = FakeContext()
        stand_in: Any = context
        inference = Inference(runtime, LoopBridge(asyncio.get_running_loop()))
        assert await asyncio.to_thread(inference.ModelInfer, message, stand_in) == b"kept"
        assert dict(context.trailing)["x-cache"] == "hit-nearby"
    outcome = InferOutcome(b"{}", None, nearby)
    headers = http_kept(outcome)[1]
    assert headers is not None
    assert (b"x-cache", b"hit-nearby") in headers  # HTTP keeps it in its headers


async def test_grpc_methods_but_inference_answer_on_the_loop(model_repository: Path) -> None:
    async with opened(model_repository) as (runtime, _):
        servicer = InferenceServicer(runtime)
        ready = await servicer.ModelReady(
            service_pb2.ModelReadyRequest(name="simple"), LoopContext(())
        )
        assert ready.ready
        stand_in = LoopContext(())
        missing = await servicer.ModelReady(service_pb2.ModelReadyRequest(name="nope"), stand_in)
        assert not missing.ready


async def test_trace_setting_says_how_tracing_is_set(model_repository: Path) -> None:
    """The server traces (``OTEL_*``), so TraceSetting must not say tracing is unsupported."""
    async with opened(model_repository) as (runtime, _):
        servicer = InferenceServicer(runtime)
        stand_in = LoopContext(())
        with pytest.raises(Aborted):
            await servicer.TraceSetting(service_pb2.TraceSettingRequest(), stand_in)
        assert stand_in.code is grpc.StatusCode.UNIMPLEMENTED
        assert "OTEL_" in stand_in.details
        assert "not supported" not in stand_in.details


async def test_the_service_resolves_once_and_decodes_large_bodies_in_a_thread(
    model_repository: Path,
) -> None:
    async with opened(model_repository) as (runtime, _):
        service = runtime.service
        seen: list[str] = []
        inputs = tuple(
            Tensor(name, "INT32", (1, 16), np.full(16, 2, dtype=np.int32).tobytes())
            for name in ("INPUT0", "INPUT1")
        )

        def decode(config: Any) -> InferRequest:
            seen.append("loop" if _on_loop() else "thread")
            return InferRequest(None, inputs, (), {}, binary_output=True)

        def render(answer: InferAnswer) -> str:
            return answer.cache_status.value

        directives = CacheDirectives()
        first = await service.answer("simple", None, decode, render, directives, transport="http")
        second = await service.answer(
            "simple", None, DecodeInThread(decode), render, directives, transport="grpc"
        )
        assert (first, second) == ("miss", "hit-local")
        assert seen == ["loop", "thread"]
        with pytest.raises(ModelNotFoundError):
            await service.answer("nope", None, decode, render, directives, transport="http")
        stats = service.statistics("simple")["model_stats"][0]["inference_stats"]
        assert stats["success"]["count"] == 2


def _on_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
