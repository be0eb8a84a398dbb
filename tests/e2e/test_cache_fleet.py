"""The response cache across real servers sharing one real Redis, driven by tritonclient's own
request encoding (sent with httpx, so the ``X-Cache`` header is visible)."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from support import loopback
from support.processes import RedisProcess, ServerProcess
from support.sample_requests import infer, x_cache
from support.waiting import wait_for

pytestmark = pytest.mark.slow

MakeServer = Callable[..., ServerProcess]


def tiered(make_server: MakeServer, redis: RedisProcess, *extra: str) -> ServerProcess:
    return make_server("--cache", "tiered", "--redis-url", redis.url, *extra)


def test_second_replica_hits_redis_then_its_local_tier(
    make_server: MakeServer, redis_server: RedisProcess
) -> None:
    first = tiered(make_server, redis_server)
    second = tiered(make_server, redis_server)
    assert x_cache(first, "simple", 1) == "miss"
    assert x_cache(first, "simple", 1) == "hit-local"
    assert x_cache(second, "simple", 1) == "hit-redis"
    assert x_cache(second, "simple", 1) == "hit-local"
    # A restarted server has an empty local tier but still finds the shared answer.
    second.restart()
    assert x_cache(second, "simple", 1) == "hit-redis"


def test_cached_answers_are_byte_identical_to_computed_ones(
    make_server: MakeServer, redis_server: RedisProcess, full_model_repository: Path
) -> None:
    """The only test here that needs a DenseNet: its servers load the whole sample repository,
    the module's others the light one."""
    first = make_server(
        "--cache", "tiered", "--redis-url", redis_server.url, repository=full_model_repository
    )
    second = make_server(
        "--cache", "tiered", "--redis-url", redis_server.url, repository=full_model_repository
    )
    for model in ("simple", "simple_string", "densenet_onnx"):
        uncached, _ = infer(first, model, 5, headers={"Cache-Control": "no-store"})
        assert uncached.headers["X-Cache"] == "bypass"
        miss, _ = infer(first, model, 5)
        local, _ = infer(first, model, 5)
        shared, _ = infer(second, model, 5)
        statuses = [r.headers["X-Cache"] for r in (miss, local, shared)]
        assert statuses == ["miss", "hit-local", "hit-redis"], model
        for response in (miss, local, shared):
            assert response.content == uncached.content, model
            assert (
                response.headers["Inference-Header-Content-Length"]
                == (uncached.headers["Inference-Header-Content-Length"])
            )


def test_client_opt_outs(make_server: MakeServer, redis_server: RedisProcess) -> None:
    server = tiered(make_server, redis_server)
    # no-store: neither looked up nor stored.
    assert x_cache(server, "simple", 2, headers={"Cache-Control": "no-store"}) == "bypass"
    assert x_cache(server, "simple", 2) == "miss"
    # no-cache: not looked up, but stored.
    assert x_cache(server, "simple", 3, headers={"Cache-Control": "no-cache"}) == "bypass"
    assert x_cache(server, "simple", 3) == "hit-local"
    assert x_cache(server, "simple", 3, headers={"Cache-Control": "no-cache"}) == "bypass"
    # "cache": false in the request parameters: a bypass, and the key ignores the parameter.
    assert x_cache(server, "simple", 4, parameters={"cache": False}) == "bypass"
    assert x_cache(server, "simple", 4) == "miss"
    assert x_cache(server, "simple", 4, parameters={"cache": False}) == "bypass"


def test_flush_endpoint_clears_every_replica(
    make_server: MakeServer, redis_server: RedisProcess
) -> None:
    first = tiered(make_server, redis_server)
    second = tiered(make_server, redis_server)
    for seed in range(3):
        assert x_cache(first, "simple", seed) == "miss"
        assert x_cache(second, "simple", seed) == "hit-redis"
    x_cache(first, "simple_string", 0)
    request = urllib.request.Request(
        f"{first.base_url}/v2/models/simple/cache/flush", method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.load(response) == {"model": "simple", "removed": 6}
    assert redis_server.client().keys("cachefleet:v2:default:simple:*") == []
    assert len(redis_server.client().keys("cachefleet:v2:default:simple_string:*")) == 1
    assert x_cache(first, "simple", 0) == "miss"
    assert x_cache(second, "simple", 1) == "miss"  # its local copy went with the broadcast
    assert x_cache(first, "simple_string", 0) == "hit-local"


def test_cache_metrics_are_exported(make_server: MakeServer, redis_server: RedisProcess) -> None:
    server = tiered(make_server, redis_server)
    x_cache(server, "simple", 0)
    x_cache(server, "simple", 0)
    # The Redis insert is written behind the miss's answer: its count shows once it is done.
    inserted = 'cachefleet_cache_inserts_total{model="simple",tier="redis",version="1"} 1.0'

    def scraped() -> str:
        text = loopback.get(f"{server.base_url}/metrics").text
        return text if inserted in text else ""

    text = wait_for(scraped, "the write-behind insert into Redis")
    assert 'cachefleet_cache_hits_total{model="simple",tier="local",version="1"} 1.0' in text
    assert 'cachefleet_cache_misses_total{model="simple",version="1"} 1.0' in text
    assert 'nv_cache_num_hits_per_model{model="simple",version="1"} 1.0' in text
    assert "cachefleet_redis_circuit_open 0.0" in text
    assert "cachefleet_upstream_circuit_open 0.0" in text  # no upstream: never open
    assert (
        'cachefleet_cache_lookup_seconds_count{model="simple",tier="local",version="1"} 2.0' in text
    )
    assert (
        'cachefleet_cache_lookup_seconds_count{model="simple",tier="redis",version="1"} 1.0' in text
    )
    assert "cachefleet_cache_local_bytes 0.0" not in text


def flush_cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cachefleet.cli.main", "flush", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_cli_flush_through_a_server(make_server: MakeServer) -> None:
    server = make_server("--cache", "local")
    assert x_cache(server, "simple", 0) == "miss"
    assert x_cache(server, "simple", 0) == "hit-local"
    result = flush_cli("--model", "simple", "--server", server.base_url)
    assert result.returncode == 0, result.stderr
    # The local entry and the answer the memo rendered from it at the hit: a flush counts
    # what every tier dropped.
    assert '"removed":2' in result.stdout.replace(" ", "")
    assert x_cache(server, "simple", 0) == "miss"
    unknown = flush_cli("--model", "nope", "--server", server.base_url)
    assert unknown.returncode == 1
    assert "404" in unknown.stderr
