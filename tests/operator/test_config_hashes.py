"""The Redis pod's config hash: it rolls Redis (throwing the cache away unless persisted), so it
covers only the settings that need a restart, and its value for every example is pinned here:
an operator upgrade that would restart every Redis at once has to change this file on purpose.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from support.kube.crd_schema import EXAMPLES

from cachefleet.operator.manifests import redis_conf
from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import CONFIG_HASH_ANNOTATION, Owner
from cachefleet.operator.manifests.spec import parse_spec

#: Redis pod hashes of the managed-Redis examples, rendered with the password below. Change them
#: only with a change that must restart every Redis, and say so in the release notes.
GOLDEN = {
    "autoscaling-hpa-queue.yaml": "6576d5b7f2dac033",
    "autoscaling-keda-misses.yaml": "6576d5b7f2dac033",
    "autoscaling.yaml": "6576d5b7f2dac033",
    "densenet-gpu-aof.yaml": "230d9161985c413d",
    "tracing.yaml": "6576d5b7f2dac033",  # the default Redis, as autoscaling.yaml's
    "external-upstream.yaml": "6576d5b7f2dac033",  # the default Redis
    "triton-upstream.yaml": "6576d5b7f2dac033",  # the default Redis
}
PASSWORD = "golden-password"
CACHE_SECRET = "golden-cache-secret"
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
BASE: dict[str, Any] = {"model": {"name": "m", "repository": {"pvc": {"claimName": "models"}}}}


def redis_hash_of(body: dict[str, Any]) -> str | None:
    meta = body.get("metadata") or {}
    owner = Owner(meta["name"], meta.get("namespace") or "default", "uid")
    children = build_children(
        parse_spec(body["spec"]), owner=owner, redis_password=PASSWORD, cache_secret=CACHE_SECRET
    )
    for child in children:
        if child["kind"] == "StatefulSet":
            return str(child["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])
    return None


def redis_hash(redis: dict[str, Any]) -> str | None:
    return redis_hash_of({"metadata": {"name": "svc"}, "spec": {**BASE, "cache": {"redis": redis}}})


def test_every_managed_redis_example_keeps_its_pinned_hash() -> None:
    found = {}
    for path in EXAMPLES:
        value = redis_hash_of(yaml.safe_load(Path(path).read_text()))
        if value is not None:
            found[path.name] = value
    assert found == GOLDEN


def test_a_new_template_with_other_comments_and_fixed_lines_restarts_no_redis(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    persisted = {"persistence": {"mode": "rdb+aof", "size": "1Gi"}}
    before = (redis_hash({}), redis_hash(persisted))
    source = resources.files("cachefleet.operator.manifests").joinpath("redis.conf.j2")
    upgraded = (
        "# rendered by a newer cachefleet-operator, with other words\n"
        + source.read_text().replace("tcp-keepalive 60", "tcp-keepalive 120")
        + "lazyfree-lazy-eviction yes\n"
    )
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, autoescape=False)
    monkeypatch.setattr(redis_conf, "_template", lambda: environment.from_string(upgraded))
    assert "lazyfree-lazy-eviction" in redis_conf.render_redis_conf(
        parse_spec(BASE).cache.redis, name="svc"
    )
    assert (redis_hash({}), redis_hash(persisted)) == before


AOF = {"mode": "aof", "size": "1Gi"}


@pytest.mark.parametrize(
    ("before", "after", "restarts"),
    [
        ({}, {"maxmemory": "300Mi"}, False),  # applied live with CONFIG SET
        ({}, {"maxmemoryPolicy": "allkeys-lfu"}, False),
        ({"persistence": AOF}, {"persistence": {**AOF, "size": "2Gi"}}, False),  # the claim grows
        ({}, {"persistence": AOF}, True),
        ({"persistence": AOF}, {"persistence": {**AOF, "appendfsync": "always"}}, True),
        (
            {"persistence": {**AOF, "mode": "rdb"}},
            {"persistence": {**AOF, "mode": "rdb", "save": "60 1"}},
            True,
        ),
        ({}, {"image": "valkey/valkey:8"}, True),
    ],
)
def test_only_settings_that_need_a_restart_change_the_hash(
    before: dict[str, Any], after: dict[str, Any], restarts: bool
) -> None:
    assert (redis_hash(copy.deepcopy(before)) != redis_hash(copy.deepcopy(after))) is restarts
