"""Cache figures of an external Redis Cluster (every primary, summed) or Sentinel's primary.

The status shows one set of figures for the whole cache: in a cluster each primary holds a
share of the keys, so memory, limits, evictions, hits and misses are summed over the primaries
(replicas hold copies, and would count twice); behind Sentinel the current primary holds them all.
redis-py errors become :class:`~cachefleet.operator.reconcile.redis_live.RedisLiveError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url
from redis.retry import Retry
from redis.sentinel import Sentinel

from cachefleet.operator.reconcile.admission import host_allowed
from cachefleet.operator.reconcile.redis_live import CacheFigures, RedisLiveError


@dataclass(frozen=True)
class ExternalRedis:
    """Where an external Redis is and how it is deployed (the spec's external block)."""

    url: str
    mode: str
    sentinel_master: str | None
    password: str | None
    timeout_s: float
    #: Hosts the operator may dial (shell patterns): the URL's, and every node it is told of.
    allowed_hosts: tuple[str, ...] = ("*",)

    def __str__(self) -> str:
        scheme, _, rest = self.url.partition("://")
        return f"{self.mode} Redis at {scheme}://{rest.rpartition('@')[2]}"


def read_topology_figures(redis_at: ExternalRedis) -> CacheFigures:
    """INFO from every primary of a cluster (summed), or from Sentinel's current primary.

    The URL is the tenant's: its host, and every node the cluster or Sentinel names, is dialled
    only when ``allowed_hosts`` admits it (the operator's network position is not the tenant's).
    """
    _check_host(redis_at, parse_url(redis_at.url).get("host", "localhost"))  # type: ignore[no-untyped-call]
    try:
        if redis_at.mode == "cluster":
            return _cluster_figures(redis_at)
        if redis_at.mode == "sentinel":
            return _sentinel_figures(redis_at)
    except (redis.RedisError, redis.exceptions.RedisClusterException, OSError) as error:
        raise RedisLiveError(f"INFO on {redis_at} failed: {error}") from None
    raise RedisLiveError(f"no topology figures for mode {redis_at.mode}")


def _options(redis_at: ExternalRedis) -> dict[str, Any]:
    options: dict[str, Any] = {
        "socket_connect_timeout": redis_at.timeout_s,
        "socket_timeout": redis_at.timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
    }
    if redis_at.password is not None:
        options["password"] = redis_at.password
    return options


def _cluster_figures(redis_at: ExternalRedis) -> CacheFigures:
    client = RedisCluster.from_url(redis_at.url, require_full_coverage=False, **_options(redis_at))
    try:
        for node in client.get_primaries():  # type: ignore[no-untyped-call]
            _check_host(redis_at, node.host)
        replies = client.info(target_nodes=RedisCluster.PRIMARIES)
    finally:
        client.close()
    if not isinstance(replies, Mapping) or not replies:
        raise RedisLiveError(f"INFO on {redis_at}: no primary answered")
    if "used_memory" in replies:  # one primary: redis-py hands back its INFO directly
        replies = {"only": replies}
    return _summed(info for info in replies.values() if isinstance(info, Mapping))


def _sentinel_figures(redis_at: ExternalRedis) -> CacheFigures:
    """INFO from the primary Sentinel names, asked once: the address checked against the
    allowed hosts is the one dialled (``master_for`` would ask Sentinel again on connecting, and
    a tenant's Sentinel may answer the second time with a host the operator may not dial)."""
    address = parse_url(redis_at.url)  # type: ignore[no-untyped-call]
    options = _options(redis_at)
    if "password" in address and "password" not in options:
        options["password"] = address["password"]
    if "username" in address:
        options["username"] = address["username"]
    if redis_at.url.startswith("rediss://"):
        options["ssl"] = True
    sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
        [(address.get("host", "localhost"), int(address.get("port", 26379)))],
        sentinel_kwargs=options,
        **options,
    )
    assert redis_at.sentinel_master is not None
    try:
        host, port = sentinel.discover_master(redis_at.sentinel_master)  # type: ignore[no-untyped-call,unused-ignore]
    finally:
        for client in sentinel.sentinels:
            client.close()
    _check_host(redis_at, str(host))
    primary = redis.Redis(host=str(host), port=int(port), **options)
    try:
        info = primary.info()
    finally:
        primary.close()
    if info.get("role") != "master":  # failed over since Sentinel answered: not the primary
        raise RedisLiveError(f"INFO on {redis_at}: {host}:{port} is no longer the primary")
    return _summed([info])


def _summed(infos: Iterable[Mapping[str, Any]]) -> CacheFigures:
    infos = list(infos)

    def total(name: str) -> int:
        return sum(int(info.get(name, 0)) for info in infos)

    policies = sorted({str(info.get("maxmemory_policy", "")) for info in infos})
    return CacheFigures(
        used_memory_bytes=total("used_memory"),
        maxmemory_bytes=total("maxmemory"),
        maxmemory_policy=",".join(policies),
        evicted_keys=total("evicted_keys"),
        keyspace_hits=total("keyspace_hits"),
        keyspace_misses=total("keyspace_misses"),
    )


def _check_host(redis_at: ExternalRedis, host: str) -> None:
    if not host_allowed(host, redis_at.allowed_hosts):
        raise RedisLiveError(
            f"{redis_at}: the operator may not dial {host} (not in its external Redis hosts)"
        )
