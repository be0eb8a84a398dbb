"""The infer route's fast path and its memo of rendered responses, through a real server.

``cachefleet serve`` answers ``POST .../infer`` from a plain ASGI callable in front of the
FastAPI app, and answers byte-identical repeats from rendered responses. These tests check
what a client would notice: every repeat renders exactly as asked (id, outputs, JSON vs
binary, classification), says how the cache answered, is counted, and never outlives the
cached entry it came from (flush, TTL); everything else still reaches the app.
"""

from __future__ import annotations

import gzip
import json
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.http as httpclient
from prometheus_client.parser import text_string_to_metric_families
from support import loopback
from support.processes import ServerProcess
from support.sample_requests import memo_figures as all_memo_figures
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MakeServer = Callable[..., ServerProcess]
FIRST = np.arange(16, dtype=np.int32).reshape(1, 16)
SECOND = np.full((1, 16), 3, dtype=np.int32)


def simple_body(
    *,
    request_id: str | None = "r1",
    outputs: list[httpclient.InferRequestedOutput] | None = None,
    binary: bool = True,
    parameters: dict[str, Any] | None = None,
) -> tuple[bytes, dict[str, str]]:
    """A ``simple`` request as tritonclient encodes it, and its headers."""
    inputs = []
    for name, array in (("INPUT0", FIRST), ("INPUT1", SECOND)):
        item = httpclient.InferInput(name, list(array.shape), "INT32")
        item.set_data_from_numpy(array, binary_data=binary)
        inputs.append(item)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        inputs, outputs=outputs, request_id=request_id or "", parameters=parameters
    )
    headers = {} if json_size is None else {"Inference-Header-Content-Length": str(json_size)}
    return body, headers


def post(
    server: ServerProcess,
    body: bytes,
    headers: dict[str, str],
    model: str = "simple",
) -> httpx.Response:
    return loopback.post(
        f"{server.base_url}/v2/models/{model}/infer", content=body, headers=headers, timeout=60
    )


def parse(response: httpx.Response) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the binary tail of an infer response."""
    length = response.headers.get("Inference-Header-Content-Length")
    if length is None:
        return json.loads(response.content), b""
    return json.loads(response.content[: int(length)]), response.content[int(length) :]


def _all_counters(server: ServerProcess, model: str = "simple") -> dict[str, float]:
    """This model's request and cache counters from /metrics, by sample name and label."""
    with urllib.request.urlopen(f"{server.base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("model") != model:
                continue
            suffix = sample.labels.get("tier") or sample.labels.get("code") or ""
            name = f"{sample.name}{':' + suffix if suffix else ''}"
            found[name] = found.get(name, 0.0) + sample.value
    return found


def _all_statistics(server: ServerProcess) -> dict[str, float]:
    """``simple``'s statistics (``/v2/models/simple/stats``), flattened: ``success.count``,
    ``cache_hit.ns``, ``execution_count``, ..."""
    stats = loopback.get(f"{server.base_url}/v2/models/simple/stats", timeout=10).json()
    (model,) = stats["model_stats"]
    found = {"execution_count": float(model["execution_count"])}
    for phase, figures in model["inference_stats"].items():
        found.update({f"{phase}.{key}": float(value) for key, value in figures.items()})
    return found


#: Each shared server's figures when the running test took it (see ``server``), by port.
BASELINES: dict[int, dict[str, dict[str, float]]] = {}


def _since(server: ServerProcess, what: str, now: dict[str, float]) -> dict[str, float]:
    """``now`` less what the figures were when the test took ``server`` (counters only grow;
    the memo's gauges are 0 then: its model was just flushed)."""
    before = BASELINES.get(server.port, {}).get(what, {})
    return {name: value - before.get(name, 0.0) for name, value in now.items()}


def counters(server: ServerProcess) -> dict[str, float]:
    """``simple``'s request and cache counters, what this test added."""
    return _since(server, "counters", _all_counters(server))


def memo_figures(server: ServerProcess) -> dict[str, float]:
    """The memo's figures, what this test added."""
    return _since(server, "memo", all_memo_figures(server))


def statistics(server: ServerProcess) -> dict[str, float]:
    """``simple``'s statistics, what this test added."""
    return _since(server, "statistics", _all_statistics(server))


@pytest.fixture
def server(sample_server: ServerProcess) -> ServerProcess:
    """The module's server (one start for the module's tests), ``simple``'s cache and memo
    flushed and its figures noted, so that each test sees a cold cache and its own figures."""
    flushed = loopback.post(f"{sample_server.base_url}/v2/models/simple/cache/flush", timeout=10)
    assert flushed.status_code == 200, flushed.text
    BASELINES[sample_server.port] = {
        "counters": _all_counters(sample_server),
        "memo": all_memo_figures(sample_server),
        "statistics": _all_statistics(sample_server),
    }
    return sample_server


def test_a_repeated_request_is_a_local_hit_with_the_same_bytes(server: ServerProcess) -> None:
    body, headers = simple_body()
    answers = [post(server, body, headers) for _ in range(4)]

    assert [a.headers["X-Cache"] for a in answers] == ["miss"] + ["hit-local"] * 3
    assert len({a.content for a in answers}) == 1
    document, tail = parse(answers[-1])
    assert document["id"] == "r1"
    assert document["model_name"] == "simple"
    sums = np.frombuffer(tail[:64], dtype=np.int32)
    assert (sums == (FIRST + SECOND).ravel()).all()
    seen = counters(server)
    assert seen["cachefleet_requests_total:200"] == 4
    assert seen["cachefleet_cache_hits_total:local"] == 3
    assert seen["cachefleet_cache_misses_total"] == 1
    assert seen["nv_cache_num_hits_per_model"] == 3
    assert seen["cachefleet_request_seconds_count"] == 4
    # The second answer was the local tier's, rendered and kept; the last two the memo's.
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 2


def test_every_rendering_of_one_entry_is_rendered_as_asked(server: ServerProcess) -> None:
    """Id, output selection, JSON vs binary and classification each change the bytes, so a
    repeat of one never gets the answer rendered for another; all share one cache entry."""
    variants = {
        "id a": simple_body(request_id="a"),
        "id b": simple_body(request_id="b"),
        "OUTPUT1 only": simple_body(outputs=[httpclient.InferRequestedOutput("OUTPUT1")]),
        "json": simple_body(
            binary=False,
            outputs=[httpclient.InferRequestedOutput(n, binary_data=False) for n in ("OUTPUT0",)],
        ),
        "top 2": simple_body(
            outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False, class_count=2)]
        ),
    }
    first: dict[str, httpx.Response] = {}
    for _ in range(3):  # first pass fills, later passes come from the memo
        for name, (body, headers) in variants.items():
            answer = post(server, body, headers)
            assert answer.status_code == 200, answer.text
            first.setdefault(name, answer)
            assert answer.content == first[name].content, name

    documents = {name: parse(answer)[0] for name, answer in first.items()}
    assert documents["id a"]["id"] == "a"
    assert documents["id b"]["id"] == "b"
    assert [o["name"] for o in documents["OUTPUT1 only"]["outputs"]] == ["OUTPUT1"]
    assert documents["json"]["outputs"][0]["data"] == (FIRST + SECOND).ravel().tolist()
    top = documents["top 2"]["outputs"][0]
    assert top["datatype"] == "BYTES"
    assert len(top["data"]) == 2
    assert top["data"][0].startswith("18:")  # the largest sum, 15 + 3, at index 15
    seen = counters(server)
    assert seen["cachefleet_cache_misses_total"] == 1
    assert seen["cachefleet_cache_hits_total:local"] == 3 * len(variants) - 1
    assert seen["cachefleet_requests_total:200"] == 3 * len(variants)
    # Each rendering was kept on its first local hit and answered from the memo after it.
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 2 * len(variants) - 1


def test_a_flush_ends_the_memoized_answer(server: ServerProcess) -> None:
    body, headers = simple_body()
    assert [post(server, body, headers).headers["X-Cache"] for _ in range(3)] == [
        "miss", "hit-local", "hit-local",
    ]  # fmt: skip
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 1
    flushed = loopback.post(f"{server.base_url}/v2/models/simple/cache/flush", timeout=10)
    assert flushed.json()["removed"] >= 1

    assert post(server, body, headers).headers["X-Cache"] == "miss"
    assert post(server, body, headers).headers["X-Cache"] == "hit-local"
    assert post(server, body, headers).headers["X-Cache"] == "hit-local"
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 2  # kept again


def test_the_memo_is_counted_as_a_tier_and_emptied_by_a_flush(server: ServerProcess) -> None:
    """An operator sees what the memo holds and answers beside the other tiers, and a flush
    of the model takes its memoized answers out, not only the entries they came from."""
    body, headers = simple_body(request_id="figures")
    assert [post(server, body, headers).headers["X-Cache"] for _ in range(4)] == [
        "miss", "hit-local", "hit-local", "hit-local",
    ]  # fmt: skip
    held = memo_figures(server)
    assert held["cachefleet_cache_tier_entries"] == 1
    assert held["cachefleet_cache_tier_bytes"] > len(post(server, body, headers).content)
    assert held["cachefleet_cache_tier_hits_total"] == 2  # the first hit was the local tier's
    assert held["cachefleet_cache_tier_evictions_total"] == 0

    loopback.post(f"{server.base_url}/v2/models/simple/cache/flush", timeout=10)
    flushed = memo_figures(server)
    assert (flushed["cachefleet_cache_tier_entries"], flushed["cachefleet_cache_tier_bytes"]) == (
        0, 0,
    )  # fmt: skip


def test_an_expired_entry_ends_the_memoized_answer(make_server: MakeServer) -> None:
    server = make_server("--cache-ttl", "1")
    body, headers = simple_body()
    assert [post(server, body, headers).headers["X-Cache"] for _ in range(2)] == [
        "miss", "hit-local",
    ]  # fmt: skip
    # Once the TTL has passed the repeat must run the model again, memo or not.
    wait_for(lambda: post(server, body, headers).headers["X-Cache"] == "miss", "expiry", 10)


def test_cache_directives_and_the_cache_parameter_skip_the_memo(server: ServerProcess) -> None:
    body, headers = simple_body()
    for _ in range(2):
        post(server, body, headers)
    for directive in ("no-cache", "no-store"):
        answer = post(server, body, {**headers, "Cache-Control": directive})
        assert answer.headers["X-Cache"] == "bypass"
        assert parse(answer)[0]["id"] == "r1"
    opted_out, opted_headers = simple_body(parameters={"cache": False})
    assert [post(server, opted_out, opted_headers).headers["X-Cache"] for _ in range(3)] == [
        "bypass"
    ] * 3
    seen = counters(server)
    assert seen["cachefleet_cache_bypass_total"] == 5
    assert seen["cachefleet_requests_total:200"] == 7


def test_compressed_requests_and_responses(server: ServerProcess) -> None:
    body, headers = simple_body()
    post(server, body, headers)  # a miss; the next is a local hit, kept in the memo
    plain = post(server, body, headers)
    zipped = post(
        server,
        gzip.compress(body),
        {**headers, "Content-Encoding": "gzip", "Accept-Encoding": "gzip"},
    )
    assert zipped.headers["X-Cache"] == "hit-local"
    assert zipped.headers["Content-Encoding"] == "gzip"
    assert zipped.content == plain.content  # httpx decompressed it
    # The inflated body is the same request: the memo answered it, compressed for this client.
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 1


def test_errors_keep_their_shape_on_the_fast_path(make_server: MakeServer) -> None:
    server = make_server("--max-request-size", "4096")
    body, headers = simple_body()
    cases = [
        ("nope", body, headers, 404),
        ("simple", b"{not json", {}, 400),
        ("simple", body + b"extra", headers, 400),
        ("simple", b"x" * 5000, {}, 413),
    ]
    for model, sent, sent_headers, status in cases:
        answer = post(server, sent, sent_headers, model)
        assert answer.status_code == status, (model, answer.text)
        assert set(answer.json()) == {"error"}
        assert "X-Cache" not in answer.headers  # no cache tier answered a refusal
    assert counters(server)["cachefleet_requests_total:400"] == 2


def test_everything_else_still_reaches_the_application(server: ServerProcess) -> None:
    assert loopback.get(f"{server.base_url}/v2", timeout=10).json()["name"]
    assert loopback.get(f"{server.base_url}/v2/models/simple/infer", timeout=10).status_code == 405
    missing = loopback.post(f"{server.base_url}/v2/models/simple/infer/more", timeout=10)
    assert missing.status_code == 404
    assert set(missing.json()) == {"error"}
    body, headers = simple_body()
    versioned = loopback.post(
        f"{server.base_url}/v2/models/simple/versions/1/infer",
        content=body,
        headers=headers,
        timeout=10,
    )
    assert versioned.status_code == 200
    assert parse(versioned)[0]["model_version"] == "1"


def test_a_memoized_answer_is_counted_once_everywhere(server: ServerProcess) -> None:
    """A memoized answer skips the service's whole path, not its accounting: each repeat is
    one request, one local hit and one lookup in the metrics, and one success and one cache
    hit in the statistics."""
    body, headers = simple_body(request_id="counted")
    answers = [post(server, body, headers) for _ in range(5)]
    assert [a.headers["X-Cache"] for a in answers] == ["miss"] + ["hit-local"] * 4
    seen = counters(server)
    assert seen["cachefleet_requests_total:200"] == 5
    assert seen["cachefleet_request_seconds_count"] == 5
    assert seen["cachefleet_cache_hits_total:local"] == 4
    assert seen["cachefleet_cache_lookup_seconds_count:local"] == 5  # the miss looked too
    assert seen["nv_inference_request_success"] == 5
    assert seen["nv_cache_num_hits_per_model"] == 4
    assert seen["nv_cache_num_misses_per_model"] == 1
    phases = statistics(server)
    assert phases["success.count"] == 5
    assert phases["cache_hit.count"] == 4
    assert phases["cache_miss.count"] == 1
    assert phases["fail.count"] == 0
    assert phases["execution_count"] == 1
    assert phases["cache_hit.ns"] > 0
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 3  # the last three


def test_a_body_in_many_pieces_is_answered_from_the_memo(server: ServerProcess) -> None:
    """The memo hashes a body piece by piece as it arrives: a chunked upload of the same bytes
    is the same request, and a different last piece is a different one."""
    body, headers = simple_body()
    assert post(server, body, headers).headers["X-Cache"] == "miss"
    plain = post(server, body, headers)

    def pieces(data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), 7):
            yield data[start : start + 7]

    url = f"{server.base_url}/v2/models/simple/infer"
    chunked = loopback.post(url, content=pieces(body), headers=headers, timeout=60)
    assert chunked.headers["X-Cache"] == "hit-local"
    assert chunked.content == plain.content
    other, other_headers = simple_body(request_id="r2")  # same tensors, another id
    renamed = loopback.post(url, content=pieces(other), headers=other_headers, timeout=60)
    assert renamed.headers["X-Cache"] == "hit-local"
    assert parse(renamed)[0]["id"] == "r2"
    assert counters(server)["cachefleet_requests_total:200"] == 4
    # The chunked repeat was the memo's (another id is another request: the local tier's).
    assert memo_figures(server)["cachefleet_cache_tier_hits_total"] == 1


def test_a_reloaded_model_ends_its_memoized_answers(make_server: MakeServer) -> None:
    """A memo entry belongs to the model object it was rendered for: after an unload the
    request is refused (and counted as such), after a load it is answered again."""
    server = make_server("--model-control-mode", "explicit", "--load-model", "*")
    body, headers = simple_body()
    assert [post(server, body, headers).headers["X-Cache"] for _ in range(2)] == [
        "miss", "hit-local",
    ]  # fmt: skip
    control = f"{server.base_url}/v2/repository/models/simple"
    assert loopback.post(f"{control}/unload", timeout=30).status_code == 200
    gone = post(server, body, headers)
    assert gone.status_code == 404
    assert loopback.post(f"{control}/load", timeout=60).status_code == 200
    again = post(server, body, headers)
    assert again.status_code == 200
    assert again.headers["X-Cache"] in ("hit-local", "miss")  # same files: entries may stay
    assert statistics(server)["success.count"] == 1
