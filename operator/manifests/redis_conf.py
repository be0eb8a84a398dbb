"""``redis.conf``, rendered from the Jinja2 template shipped with the package."""

from __future__ import annotations

import functools
from importlib import resources

import jinja2

from cachefleet.operator.manifests.meta import REDIS_PORT
from cachefleet.operator.manifests.redis_memory import maxmemory_bytes
from cachefleet.operator.manifests.spec import Redis

LIVE_SETTINGS = ("maxmemory", "maxmemory-policy")


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


def restart_relevant(conf: str) -> str:
    """The configuration without the settings applied live, for the pods' config hash."""
    return "\n".join(
        line for line in conf.splitlines() if line.split(" ", 1)[0] not in LIVE_SETTINGS
    )
