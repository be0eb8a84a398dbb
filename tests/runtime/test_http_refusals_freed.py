"""A refused request's body and parsed JSON are freed when its answer is sent, not when the
cyclic collector next runs. An error raised with the request's frames in its traceback, and
kept by one of those frames, makes a cycle; one such held each large refused JSON document
(22 MiB for an 8 MiB list of numbers) until then, and resident memory climbed by hundreds of
MiB under a stream of large bad requests (``tests/reliability/test_memory_bound.py``). With the
collector off, whatever a request leaves in a cycle stays to be counted here: nothing large,
and no refusal."""

from __future__ import annotations

import gc
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from support.served_app import opened_server

from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.http.infer_codec import THREAD_DECODE_BYTES

#: Anything a request leaves in a cycle that is this large is its body or its document.
LARGE = 256 * 1024


@pytest.fixture
async def client(light_model_repository: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with opened_server(light_model_repository, "--cache", "local") as app:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
            yield client


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def left_in_cycles() -> list[tuple[str, int]]:
    """What only the cyclic collector would free that is large, or a refusal (type, size)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [
            (type(o).__name__, sys.getsizeof(o))
            for o in gc.garbage
            if isinstance(o, ServingError) or sys.getsizeof(o) >= LARGE
        ]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def _inputs(first: dict[str, object]) -> dict[str, object]:
    second = {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16}
    return {"inputs": [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], **first}, second]}


def large_json_of_the_wrong_count() -> tuple[bytes, dict[str, str]]:
    body = orjson.dumps(_inputs({"data": [7] * 300_000}))
    assert len(body) > THREAD_DECODE_BYTES  # decoded in a worker thread, refused after
    return body, {"Content-Type": "application/json"}


def small_json_of_the_wrong_count_with_a_large_binary_tail() -> tuple[bytes, dict[str, str]]:
    header = orjson.dumps(_inputs({"parameters": {"binary_data_size": 1 << 20}}))
    return header + bytes(1 << 20), {"Inference-Header-Content-Length": str(len(header))}


def a_header_length_that_is_not_a_number() -> tuple[bytes, dict[str, str]]:
    return bytes(1 << 20), {"Inference-Header-Content-Length": "twelve"}


@pytest.mark.parametrize(
    "refused",
    [
        large_json_of_the_wrong_count,
        small_json_of_the_wrong_count_with_a_large_binary_tail,
        a_header_length_that_is_not_a_number,
    ],
)
@pytest.mark.usefixtures("collector_off")
async def test_a_refused_request_leaves_nothing_large_in_a_cycle(
    client: httpx.AsyncClient, refused: object
) -> None:
    assert callable(refused)
    body, headers = refused()
    for _ in range(3):
        answer = await client.post("/v2/models/simple/infer", content=body, headers=headers)
        assert answer.status_code == 400, answer.text
    assert left_in_cycles() == []
