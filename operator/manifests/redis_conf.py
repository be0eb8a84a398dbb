"""``redis.conf``, rendered from the Jinja2 template shipped with the package."""

from __future__ import annotations

import functools
from importlib import resources

import jinja2

from cachefleet.operator.manifests.meta import REDIS_PORT
from cachefleet.operator.manifests.redis_memory import maxmemory_bytes
from cachefleet.operator.manifests.spec import Redis


@functools.cache
def _template() -> jinja2.Template:
    source = resources.files(__package__).joinpath("redis.conf.j2").read_text()
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )
    return environment.from_string(source)


def render_redis_conf(redis: Redis, *, name: str) -> str:
    persistence = redis.persistence_or_default
    return _template().render(
        name=name,
        port=REDIS_PORT,
        maxmemory_bytes=maxmemory_bytes(redis),
        maxmemory_policy=redis.maxmemory_policy,
        rdb=persistence.mode in ("rdb", "rdb+aof"),
        aof=persistence.mode in ("aof", "rdb+aof"),
        save=" ".join(persistence.save.split()),
        appendfsync=persistence.appendfsync,
    )


def restart_settings(redis: Redis) -> dict[str, str]:
    """The spec's Redis settings that take a restart to change, for the pod's config hash.

    Only what the spec decides and the operator does not apply live: persistence (RDB
    snapshots, the append-only file and their tuning). The template's fixed lines, its comments
    and the live maxmemory settings stay out, so an operator upgrade that changes them restarts
    no Redis (and throws no cache away); Redis reads them at its next restart. A setting that
    starts to matter here changes every hash: tests/operator/test_config_hashes.py pins them.
    """
    persistence = redis.persistence_or_default
    settings: dict[str, str] = {"persistence": persistence.mode}
    if persistence.mode in ("rdb", "rdb+aof"):
        settings["save"] = " ".join(persistence.save.split())
    if persistence.mode in ("aof", "rdb+aof"):
        settings["appendfsync"] = persistence.appendfsync
    return settings
