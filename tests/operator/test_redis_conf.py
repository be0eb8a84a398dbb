"""The rendered redis.conf is accepted by a real redis-server and means what the spec says."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from support.processes import RedisProcess

from cachefleet.operator.manifests.redis_conf import render_redis_conf
from cachefleet.operator.manifests.spec import parse_spec

REPOSITORY = {"pvc": {"claimName": "models"}}


StartWithConf = Callable[[str], redis.Redis]


@pytest.fixture
def start_with_conf(tmp_path: Path) -> Iterator[StartWithConf]:
    started: list[RedisProcess] = []

    def start(conf: str) -> redis.Redis:
        path = tmp_path / "redis.conf"
        # The pod's data folder is /data; here it is a temporary folder on loopback.
        path.write_text(conf.replace("dir /data", f"dir {tmp_path}").replace("bind * -::*", ""))
        server = RedisProcess(tmp_path, config=path)
        started.append(server)
        server.start()
        return redis.Redis(host="127.0.0.1", port=server.port, decode_responses=True)

    yield start
    for server in started:
        server.stop()


@pytest.mark.parametrize("mode", ["none", "rdb", "aof", "rdb+aof"])
def test_redis_server_runs_with_the_rendered_conf(
    start_with_conf: StartWithConf, mode: str
) -> None:
    spec = parse_spec({
        "model": {"name": "m", "repository": REPOSITORY},
        "cache": {"redis": {"maxmemory": "100Mi", "maxmemoryPolicy": "volatile-lfu",
                            "persistence": {"mode": mode, "size": "1Gi"}}},
    })  # fmt: skip
    conf = render_redis_conf(spec.cache.redis, name="svc")
    assert "requirepass" not in conf
    client = start_with_conf(conf)
    settings = client.config_get("*")
    assert settings["maxmemory"] == str(100 * 2**20)
    assert settings["maxmemory-policy"] == "volatile-lfu"
    assert settings["appendonly"] == ("yes" if "aof" in mode else "no")
    assert bool(settings["save"]) == ("rdb" in mode)
