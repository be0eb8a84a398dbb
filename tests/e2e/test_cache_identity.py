"""Cache identity across a fleet, with real servers on one real Redis: an answer is served only
to a model with the same files, in the same fleet namespace, and only if the fleet wrote it.

``simple`` here comes in two builds under one name and version: the sample (``OUTPUT0`` is the
sum) and a build with its outputs swapped (``OUTPUT0`` is the difference), so which files
answered a request shows in the answer itself.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.waiting import wait_for

from cachefleet.runtime.cache.entry import EntryMac, encode_entry
from cachefleet.runtime.cache.key import KeySpace, compute_key
from cachefleet.runtime.samples.arithmetic import build_simple
from cachefleet.runtime.samples.onnx_build import make_model
from cachefleet.runtime.tensor import Tensor
from harness.chaos.answers import served_fingerprint

pytestmark = pytest.mark.slow

MakeServer = Callable[..., ServerProcess]
SECRET = "a fleet secret of enough length"


def swapped_simple() -> bytes:
    """``simple`` with its outputs swapped: same signature, OUTPUT0 is the difference."""
    graph = build_simple().graph
    for node in graph.node:
        node.output[0] = {"OUTPUT0": "OUTPUT1", "OUTPUT1": "OUTPUT0"}[node.output[0]]
    return make_model(graph).SerializeToString()


def simple_only(model_repository: Path, folder: Path, *, subtracts: bool = False) -> Path:
    """A repository holding only ``simple`` (adds), or its swapped build (subtracts)."""
    shutil.copytree(model_repository / "simple", folder / "simple")
    if subtracts:
        (folder / "simple" / "1" / "model.onnx").write_bytes(swapped_simple())
    return folder


@pytest.fixture
def adds(model_repository: Path, tmp_path: Path) -> Path:
    return simple_only(model_repository, tmp_path / "adds")


@pytest.fixture
def subtracts(model_repository: Path, tmp_path: Path) -> Path:
    return simple_only(model_repository, tmp_path / "subtracts", subtracts=True)


def ask(server: ServerProcess, value: int) -> tuple[str, list[int]]:
    """``simple`` on INPUT0 = value, INPUT1 = 1: X-Cache and OUTPUT0 (value+1 or value-1)."""
    document = {
        "inputs": [
            {"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": [value] * 16},
            {"name": "INPUT1", "datatype": "INT32", "shape": [1, 16], "data": [1] * 16},
        ],
        "outputs": [{"name": "OUTPUT0"}],
    }
    response = loopback.post(f"{server.base_url}/v2/models/simple/infer", json=document, timeout=30)
    assert response.status_code == 200, response.text
    return response.headers["X-Cache"], response.json()["outputs"][0]["data"]


def tiered(
    make_server: MakeServer, redis: RedisProcess, repository: Path, *extra: str, **kw: Any
) -> ServerProcess:
    return make_server(
        "--cache", "tiered", "--redis-url", redis.url, *extra, repository=repository, **kw
    )


def written(server: ServerProcess) -> None:
    """Wait until the server's write-behind inserts have reached Redis."""
    wait_for(
        lambda: (
            'cachefleet_cache_inserts_total{model="simple",tier="redis",version="1"}'
            in loopback.get(f"{server.base_url}/metrics").text
        ),
        "the insert to reach Redis",
    )


def test_other_files_under_one_name_and_version_never_share_an_answer(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path, subtracts: Path
) -> None:
    adding = tiered(make_server, redis_server, adds)
    subtracting = tiered(make_server, redis_server, subtracts)
    assert ask(adding, 5) == ("miss", [6] * 16)
    written(adding)
    assert ask(subtracting, 5) == ("miss", [4] * 16)  # never hit-redis from the other files
    assert ask(subtracting, 5) == ("hit-local", [4] * 16)
    assert ask(adding, 5) == ("hit-local", [6] * 16)
    # Same files on another replica: the shared entry serves it.
    replica = tiered(make_server, redis_server, adds)
    assert ask(replica, 5) == ("hit-redis", [6] * 16)
    assert served_fingerprint(replica.base_url) == served_fingerprint(adding.base_url)
    assert served_fingerprint(subtracting.base_url) != served_fingerprint(adding.base_url)


def test_a_restart_on_new_files_never_serves_the_old_answers(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path
) -> None:
    server = make_server("--cache", "redis", "--redis-url", redis_server.url, repository=adds)
    assert ask(server, 7) == ("miss", [8] * 16)
    written(server)
    assert ask(server, 7) == ("hit-redis", [8] * 16)
    old = set(redis_server.client().keys("cachefleet:v2:default:simple:*"))
    (adds / "simple" / "1" / "model.onnx").write_bytes(swapped_simple())  # same version
    server.restart()
    assert ask(server, 7) == ("miss", [6] * 16)
    assert old <= set(redis_server.client().keys("cachefleet:v2:default:simple:*")), "kept"
    written(server)
    assert ask(server, 7) == ("hit-redis", [6] * 16)


def test_a_reload_under_load_never_serves_the_old_answers(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path
) -> None:
    server = tiered(
        make_server, redis_server, adds, "--model-control-mode", "explicit", "--load-model", "*"
    )
    values = range(8)
    for value in values:
        assert ask(server, value) == ("miss", [value + 1] * 16)
    reloaded_at: list[float] = []
    answers: list[tuple[float, int, list[int]]] = []
    stop = threading.Event()

    def load() -> None:
        index = 0
        while not stop.is_set():
            value = values[index % len(values)]
            sent = time.monotonic()
            answers.append((sent, value, ask(server, value)[1]))
            index += 1

    workers = [threading.Thread(target=load) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(0.5)
        (adds / "simple" / "1" / "model.onnx").write_bytes(swapped_simple())
        response = loopback.post(f"{server.base_url}/v2/repository/models/simple/load", timeout=60)
        assert response.status_code == 200, response.text
        reloaded_at.append(time.monotonic())
        time.sleep(0.5)
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)
    after = [(value, data) for sent, value, data in answers if sent > reloaded_at[0]]
    assert after, "no request was sent after the reload"
    for value, data in after:
        assert data == [value - 1] * 16, f"an answer of the previous files for {value}"
    for _, value, data in answers:
        assert data in ([value + 1] * 16, [value - 1] * 16)


def test_a_flush_in_one_namespace_leaves_the_others_entries_and_local_tiers(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path
) -> None:
    first = tiered(make_server, redis_server, adds, "--cache-namespace", "team-a/fleet")
    other = tiered(
        make_server, redis_server, adds, env={"CACHEFLEET_CACHE_NAMESPACE": "team-b/fleet"}
    )
    for value in range(3):
        assert ask(first, value)[0] == "miss"
        assert ask(other, value)[0] == "miss"  # namespaces share nothing, not even same files
    written(first)
    written(other)
    client = redis_server.client()
    wait_for(lambda: len(client.keys("cachefleet:v2:team-b/fleet:simple:*")) == 3, "b's inserts")
    flushed = loopback.post(f"{first.base_url}/v2/models/simple/cache/flush", timeout=30)
    assert flushed.json() == {"model": "simple", "removed": 6}
    assert client.keys("cachefleet:v2:team-a/fleet:simple:*") == []
    assert len(client.keys("cachefleet:v2:team-b/fleet:simple:*")) == 3
    time.sleep(0.3)  # a flush message, had it reached the other namespace, would be in by now
    for value in range(3):
        assert ask(other, value) == ("hit-local", [value + 1] * 16)
        assert ask(first, value)[0] == "miss"


def errors(server: ServerProcess, kind: str) -> float:
    line = f'cachefleet_cache_errors_total{{kind="{kind}",tier="redis"}} '
    text = loopback.get(f"{server.base_url}/metrics", timeout=10).text
    return sum(float(row.split()[-1]) for row in text.splitlines() if row.startswith(line))


@pytest.mark.parametrize("seal", ["none", "another secret"])
def test_a_forged_entry_is_a_miss_deleted_and_counted(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path, seal: str
) -> None:
    server = make_server(
        "--cache", "redis", "--redis-url", redis_server.url, repository=adds,
        env={"CACHEFLEET_CACHE_SECRET": SECRET},
    )  # fmt: skip
    # The right digest (anyone who sees the request can compute it), the wrong answer.
    inputs = [
        Tensor.from_numpy("INPUT0", np.full((1, 16), 9, dtype="<i4")),
        Tensor.from_numpy("INPUT1", np.ones((1, 16), dtype="<i4")),
    ]
    key = compute_key("simple", "1", served_fingerprint(server.base_url), inputs, {})
    wrong = [
        Tensor.from_numpy(name, np.full((1, 16), 666, dtype="<i4"))
        for name in ("OUTPUT0", "OUTPUT1")
    ]
    mac = None if seal == "none" else EntryMac("another secret of enough length")
    where = KeySpace().redis_key(key)
    client = redis_server.client()
    client.set(where, encode_entry(key.digest, wrong, None, mac))
    assert ask(server, 9) == ("miss", [10] * 16)
    assert errors(server, "forged") == 1
    # Deleted, then replaced by the fleet's own sealed entry, which serves.
    wait_for(lambda: client.get(where) not in (None, encode_entry(key.digest, wrong, None, mac)),
             "the forged entry to be replaced")  # fmt: skip
    assert ask(server, 9) == ("hit-redis", [10] * 16)
    assert errors(server, "forged") == 1


def test_the_fingerprint_is_visible_in_config_metrics_and_log(
    make_server: MakeServer, adds: Path, subtracts: Path
) -> None:
    server = make_server("--cache", "local", repository=adds)
    fingerprint = served_fingerprint(server.base_url)
    assert len(fingerprint) == 64
    # gRPC's config response carries the same parameter (the document is ModelConfig's JSON).
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        config = client.get_model_config("simple").config
        assert config.parameters["cachefleet.fingerprint"].string_value == fingerprint
    finally:
        client.close()
    info = f'cachefleet_model_info{{fingerprint="{fingerprint}",model="simple",version="1"}} 1.0'
    assert info in loopback.get(f"{server.base_url}/metrics").text
    assert "model 'simple' version 1: READY on" in server.log()
    assert f"fingerprint {fingerprint}" in server.log()
    # Other files, another fingerprint, in both places.
    other = make_server("--cache", "local", repository=subtracts)
    assert served_fingerprint(other.base_url) != fingerprint
    assert fingerprint not in loopback.get(f"{other.base_url}/metrics").text


def unlinks(client: Any) -> int:
    """UNLINK commands the Redis server has run (the shared tier deletes with UNLINK)."""
    return int(client.info("commandstats").get("cmdstat_unlink", {}).get("calls", 0))


def test_an_entry_past_its_own_expiry_is_a_miss_and_deleted(
    make_server: MakeServer, redis_server: RedisProcess, adds: Path
) -> None:
    """Redis's TTL on the key still runs (an hour), but the entry says it expired a minute
    ago: it is never served, and it is deleted before the fleet's fresh answer replaces it."""
    server = make_server("--cache", "redis", "--redis-url", redis_server.url, repository=adds)
    inputs = [
        Tensor.from_numpy("INPUT0", np.full((1, 16), 7, dtype="<i4")),
        Tensor.from_numpy("INPUT1", np.ones((1, 16), dtype="<i4")),
    ]
    key = compute_key("simple", "1", served_fingerprint(server.base_url), inputs, {})
    stale = [
        Tensor.from_numpy(name, np.full((1, 16), 555, dtype="<i4"))
        for name in ("OUTPUT0", "OUTPUT1")
    ]
    where = KeySpace().redis_key(key)
    client = redis_server.client()
    planted = encode_entry(key.digest, stale, time.time() - 60, None)
    client.set(where, planted, ex=3600)
    before = unlinks(client)
    assert ask(server, 7) == ("miss", [8] * 16)
    assert ask(server, 7) in (("miss", [8] * 16), ("hit-redis", [8] * 16))  # never the stale one
    wait_for(lambda: unlinks(client) == before + 1, "the expired entry to be deleted")
    wait_for(lambda: client.get(where) not in (None, planted), "the expired entry to be replaced")
    assert ask(server, 7) == ("hit-redis", [8] * 16)
    assert errors(server, "corrupt") == errors(server, "forged") == 0
