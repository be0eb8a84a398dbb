"""A request's own mistake fails that request alone, as a 400, on a real server: never an
identical request that joined it in flight, and never as a 500."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from support import loopback
from support.batching import write_variant
from support.processes import RedisProcess, ServerProcess

PRIORITIES = "dynamic_batching { priority_levels: 2 default_priority_level: 1 }\n"


def post(server: ServerProcess, priority: int) -> httpx.Response:
    document = {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": [1, 16], "data": [3] * 16}
            for name in ("INPUT0", "INPUT1")
        ],
        "parameters": {"priority": priority},
    }
    return loopback.post(
        f"{server.base_url}/v2/models/simple_priorities/infer", json=document, timeout=30
    )


def test_an_invalid_priority_fails_only_its_own_request(
    make_server: Callable[..., ServerProcess],
    redis_server: RedisProcess,
    model_repository: Path,
    tmp_path: Path,
) -> None:
    """The invalid request leads: its Redis lookup is held (``CLIENT PAUSE``) while an identical
    valid one arrives, which would join its flight if the priority were checked only when the
    model runs. Priority is not keyed (it only schedules), so the two share a key."""
    config = (model_repository / "simple" / "config.pbtxt").read_text() + PRIORITIES
    write_variant(tmp_path / "repo", model_repository, "simple", "simple_priorities", config)
    server = make_server(
        "--cache", "tiered", "--redis-url", redis_server.url, "--redis-socket-timeout", "5",
        repository=tmp_path / "repo",
    )  # fmt: skip
    redis_server.command("CLIENT", "PAUSE", "1500", "ALL")
    invalid: list[httpx.Response] = []
    leader = threading.Thread(target=lambda: invalid.append(post(server, 99)))
    started = time.monotonic()
    leader.start()
    time.sleep(0.3)
    valid = post(server, 2)
    leader.join(30)
    assert invalid[0].status_code == 400, invalid[0].text
    assert "priority 99" in invalid[0].json()["error"]
    assert valid.status_code == 200, valid.text
    assert valid.headers["X-Cache"] == "miss"
    assert time.monotonic() - started > 1.0  # the valid one did wait for the paused Redis
