"""The rendered redis.conf is accepted by a real redis-server and means what the spec says."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from cachefleet.operator.manifests.redis_conf import render_redis_conf
from cachefleet.operator.manifests.spec import parse_spec

REPOSITORY = {"pvc": {"claimName": "models"}}


@pytest.fixture
def start_with_conf(tmp_path: Path) -> Iterator[object]:
    import conftest  # the shared fixtures' helpers: free ports, waiting

    processes: list[subprocess.Popen[bytes]] = []

    def start(conf: str) -> redis.Redis:
        port = conftest.free_port()
        path = tmp_path / "redis.conf"
        # The pod's data folder is /data; here it is a temporary folder on loopback.
        path.write_text(conf.replace("dir /data", f"dir {tmp_path}").replace("bind * -::*", ""))
        command = [conftest.REDIS_SERVER, str(path), "--port", str(port), "--bind", "127.0.0.1"]
        processes.append(
            subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        client = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.ConnectionError:
                return False

        conftest.wait_until(answers, 10, "redis-server with the rendered redis.conf")
        return client

    yield start
    for process in processes:
        process.terminate()
        process.wait(10)


@pytest.mark.parametrize("mode", ["none", "rdb", "aof", "rdb+aof"])
def test_redis_server_runs_with_the_rendered_conf(start_with_conf: object, mode: str) -> None:
    spec = parse_spec({
        "model": {"name": "m", "repository": REPOSITORY},
        "cache": {"redis": {"maxmemory": "100Mi", "maxmemoryPolicy": "volatile-lfu",
                            "persistence": {"mode": mode, "size": "1Gi"}}},
    })  # fmt: skip
    conf = render_redis_conf(spec.cache.redis, name="svc")
    assert "requirepass" not in conf
    client = start_with_conf(conf)  # type: ignore[operator]
    settings = client.config_get("*")
    assert settings["maxmemory"] == str(100 * 2**20)
    assert settings["maxmemory-policy"] == "volatile-lfu"
    assert settings["appendonly"] == ("yes" if "aof" in mode else "no")
    assert bool(settings["save"]) == ("rdb" in mode)
