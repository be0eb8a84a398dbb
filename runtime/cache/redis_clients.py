"""How the Redis tier connects, per ``--redis-mode``: one server, a Redis Cluster, or Sentinel.

Construction only: the tier's GET/SET/flush logic (``redis_tier``) is the same for every mode
because redis-py's ``Redis`` and ``RedisCluster`` share the command API. What differs is here:

- ``standalone``: a :class:`~redis.asyncio.BlockingConnectionPool` whose wait is short, so a
  saturated pool fails fast instead of queueing requests.
- ``cluster``: redis-py's :class:`~redis.asyncio.cluster.RedisCluster`, seeded with the URL's node.
  It routes each key to its slot's primary and follows MOVED/ASK and failovers itself. Partial
  coverage is accepted (``require_full_coverage=False``), so a cluster with a dead shard still
  serves the others, and every error is left to the caller at once (no client retries): the tier's
  per-shard circuit breakers decide when a shard is asked again. :meth:`shard_of` names the node
  a key lives on, which is what the breakers are keyed by.
- ``sentinel``: redis-py's :class:`~redis.asyncio.sentinel.Sentinel` asked for the primary's
  address on every new connection. redis-py only asks when it opens a connection, and after a
  ``SENTINEL FAILOVER`` the demoted primary keeps accepting writes on old connections until
  Sentinel reconfigures it (seconds later), so the pool is also told to ask every
  :data:`PRIMARY_CHECK_S`: when the answer changes, its idle connections close and busy ones
  are dropped when returned, and the next command goes to the new primary, without a restart.

The hot commands of standalone and sentinel modes go over one :class:`PipelinedConnection` of
the runtime's own (see ``pipelined`` and ``redis_endpoint``), to the URL's node or to the
primary Sentinel names; in sentinel mode it is retired when Sentinel names another primary, like
the pool's own connections. Cluster mode has none: its commands go
through redis-py's cluster client, which follows MOVED/ASK replies.

The same credentials, TLS files and timeouts go to every node (and to the Sentinel).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import redis.asyncio as aioredis
import redis.exceptions as rexc
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff

from cachefleet.runtime.cache.pipelined import PipelinedConnection
from cachefleet.runtime.cache.redis_endpoint import Endpoint, endpoint
from cachefleet.runtime.config import RedisSettings

#: The shard name when there is only one (standalone, sentinel) or the key's node is unknown.
WHOLE = "redis"
#: How often sentinel mode asks Sentinel which node is the primary.
PRIMARY_CHECK_S = 0.5


def connection_options(
    settings: RedisSettings, *, socket_timeout_s: float | None
) -> dict[str, Any]:
    """Keyword arguments for a redis-py pool or client built from ``settings.url``."""
    assert settings.url is not None
    options: dict[str, Any] = {
        "socket_connect_timeout": settings.connect_timeout_s,
        "socket_timeout": socket_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "client_name": "cachefleet",
    }
    if settings.password is not None:
        options["password"] = settings.password.get_secret_value()
    if settings.url.startswith("rediss://"):
        options["ssl_ca_certs"] = _path(settings.tls_ca_file)
        options["ssl_certfile"] = _path(settings.tls_cert_file)
        options["ssl_keyfile"] = _path(settings.tls_key_file)
        options["ssl_check_hostname"] = True  # redis-py before 6 did not check by default
    return options


def _path(value: object) -> str | None:
    return None if value is None else str(value)


class RedisConnection(Protocol):
    """A connected client, whatever the deployment, and where a key lives."""

    #: ``redis.asyncio.Redis`` or ``RedisCluster``: the same command methods on both.
    client: Any

    def shard_of(self, key: str) -> str:
        """The name of the node ``key`` is served by (one name when there is one node)."""
        ...

    def pipelined(self, *, stall_s: float, connect_timeout_s: float) -> PipelinedConnection | None:
        """A shared connection for the hot commands, or None where they need the client."""
        ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def _fixed(node: Endpoint) -> Callable[[], Awaitable[Endpoint]]:
    async def locate() -> Endpoint:
        return node

    return locate


class StandaloneConnection:
    """One Redis through a blocking pool with a short wait."""

    def __init__(self, settings: RedisSettings, *, socket_timeout_s: float, pool_size: int) -> None:
        assert settings.url is not None
        pool = aioredis.BlockingConnectionPool.from_url(
            settings.url,
            max_connections=pool_size,
            timeout=max(socket_timeout_s, 0.01),
            **connection_options(settings, socket_timeout_s=socket_timeout_s),
        )
        self.client: Any = aioredis.Redis(connection_pool=pool)
        self._node = endpoint(settings)

    def shard_of(self, key: str) -> str:
        return WHOLE

    def pipelined(self, *, stall_s: float, connect_timeout_s: float) -> PipelinedConnection:
        return PipelinedConnection(
            _fixed(self._node), stall_s=stall_s, connect_timeout_s=connect_timeout_s
        )

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        await self.client.aclose(close_connection_pool=True)


class ClusterConnection:
    """A Redis Cluster through redis-py's cluster client, seeded with the URL's node."""

    def __init__(self, settings: RedisSettings, *, socket_timeout_s: float, pool_size: int) -> None:
        assert settings.url is not None
        self.client: Any = RedisCluster.from_url(
            settings.url,
            require_full_coverage=False,
            max_connections=pool_size,
            **connection_options(settings, socket_timeout_s=socket_timeout_s),
        )
        self._connect_timeout_s = settings.connect_timeout_s + 2 * socket_timeout_s

    def shard_of(self, key: str) -> str:
        """The primary serving ``key``'s slot, from the client's slot table (no I/O)."""
        try:
            node = self.client.nodes_manager.get_node_from_slot(self.client.keyslot(key))
        except (rexc.RedisClusterException, KeyError, IndexError):
            return WHOLE  # not discovered yet, or the slot is uncovered
        return str(node.name)

    def pipelined(self, *, stall_s: float, connect_timeout_s: float) -> None:
        return None  # keys move between nodes: the cluster client routes and follows them

    async def start(self) -> None:
        """Discover the slots now when the cluster answers; later commands retry otherwise."""
        try:
            async with asyncio.timeout(self._connect_timeout_s * 4):
                await self.client.initialize()
        except (rexc.RedisError, rexc.RedisClusterException, OSError, TimeoutError):
            pass  # the first command discovers again; the caller's ping reports the outage

    async def close(self) -> None:
        await self.client.aclose()


class SentinelConnection:
    """The primary that a Sentinel names, looked up again on every new connection."""

    def __init__(self, settings: RedisSettings, *, socket_timeout_s: float, pool_size: int) -> None:
        assert settings.url is not None
        assert settings.sentinel_master is not None
        address = parse_url(settings.url)
        options = connection_options(settings, socket_timeout_s=socket_timeout_s)
        if "username" in address:
            options["username"] = address["username"]
        if "password" in address and "password" not in options:
            options["password"] = address["password"]
        if settings.url.startswith("rediss://"):
            options["ssl"] = True
        sentinel_options = {k: v for k, v in options.items() if k != "client_name"}
        self._deadline_s = settings.connect_timeout_s + 2 * socket_timeout_s
        self.sentinel = Sentinel(  # type: ignore[no-untyped-call,unused-ignore]  # typed from redis-py 8.2
            [(address.get("host", "localhost"), int(address.get("port", 26379)))],
            sentinel_kwargs=sentinel_options,
            **options,
        )
        self.client: Any = self.sentinel.master_for(
            settings.sentinel_master, max_connections=pool_size, db=int(address.get("db", 0))
        )
        self._watch: asyncio.Task[None] | None = None
        self._pipes: list[PipelinedConnection] = []
        #: Credentials, database and TLS of the primary's connections (its address is asked).
        self._node = endpoint(settings)

    def shard_of(self, key: str) -> str:
        return WHOLE

    def pipelined(self, *, stall_s: float, connect_timeout_s: float) -> PipelinedConnection:
        pipe = PipelinedConnection(
            self._primary, stall_s=stall_s, connect_timeout_s=connect_timeout_s
        )
        self._pipes.append(pipe)
        return pipe

    async def _primary(self) -> Endpoint:
        """The node Sentinel names the primary now (redis-py's public lookup)."""
        host, port = await self.client.connection_pool.get_master_address()
        return self._node.at(host, int(port))

    async def start(self) -> None:
        self._watch = asyncio.create_task(self._follow_primary(), name="redis-sentinel-watch")

    async def _follow_primary(self) -> None:
        """Ask Sentinel for the primary now and then; the pool drops connections to an old one."""
        while True:
            with contextlib.suppress(rexc.RedisError, OSError, TimeoutError):
                async with asyncio.timeout(max(PRIMARY_CHECK_S, self._deadline_s)):
                    primary = await self.client.connection_pool.get_master_address()
                for pipe in self._pipes:
                    pipe.retire(keep=functools.partial(_connected_to, primary))
            await asyncio.sleep(PRIMARY_CHECK_S)

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        await self.client.aclose(close_connection_pool=True)
        for client in self.sentinel.sentinels:  # Sentinel.aclose is redis-py 8's only
            await client.aclose()


def _connected_to(primary: tuple[str, int], address: tuple[str, int]) -> bool:
    return tuple(address) == (primary[0], int(primary[1]))


def connect(settings: RedisSettings, *, socket_timeout_s: float, pool_size: int) -> RedisConnection:
    """The connection ``settings.mode`` asks for (nothing is sent before ``start``)."""
    kinds: dict[str, type[StandaloneConnection | ClusterConnection | SentinelConnection]] = {
        "standalone": StandaloneConnection,
        "cluster": ClusterConnection,
        "sentinel": SentinelConnection,
    }
    return kinds[settings.mode](settings, socket_timeout_s=socket_timeout_s, pool_size=pool_size)


def node_client(settings: RedisSettings, host: str, port: int) -> aioredis.Redis:
    """A plain client for one node at ``host:port`` with the URL's credentials and TLS."""
    assert settings.url is not None
    address = parse_url(settings.url)
    options = connection_options(settings, socket_timeout_s=None)
    for name in ("username", "password"):
        if name in address and name not in options:
            options[name] = address[name]
    if settings.url.startswith("rediss://"):
        options["ssl"] = True
    return aioredis.Redis(host=host, port=port, **options)


class SubscriberSource:
    """Finds a node to subscribe to the flush channel on, again after every disconnect.

    Pub/sub messages reach every node of a Redis Cluster, so any reachable node will do: the
    cluster client is kept between reconnects because it remembers every node it discovered
    (the seed of the URL may be the node that died). In sentinel mode the primary is asked for
    again, so a failover moves the subscription to the new primary.
    """

    def __init__(self, settings: RedisSettings) -> None:
        assert settings.url is not None
        self._settings = settings
        self._cluster: Any = None

    async def connect(self) -> aioredis.Redis:
        settings = self._settings
        assert settings.url is not None
        if settings.mode == "sentinel":
            return await self._sentinel_primary()
        if settings.mode == "cluster":
            return await self._cluster_node()
        return aioredis.Redis.from_url(
            settings.url, **connection_options(settings, socket_timeout_s=None)
        )

    async def _sentinel_primary(self) -> aioredis.Redis:
        connection = SentinelConnection(
            self._settings, socket_timeout_s=self._settings.socket_timeout_s, pool_size=1
        )
        try:
            assert self._settings.sentinel_master is not None
            host, port = await connection.sentinel.discover_master(self._settings.sentinel_master)
        finally:
            await connection.close()
        return node_client(self._settings, str(host), int(port))

    async def _cluster_node(self) -> aioredis.Redis:
        if self._cluster is None:
            self._cluster = ClusterConnection(
                self._settings, socket_timeout_s=self._settings.socket_timeout_s, pool_size=2
            ).client
            await self._cluster.initialize()
        else:
            await self._cluster.nodes_manager.initialize()
        error: Exception = rexc.ConnectionError("no cluster node known")
        for node in self._cluster.get_nodes():
            client = node_client(self._settings, node.host, node.port)
            try:
                await client.ping()
            except (rexc.RedisError, OSError) as failed:
                error = failed
                await client.aclose()
                continue
            return client
        raise error

    async def close(self) -> None:
        if self._cluster is not None:
            cluster, self._cluster = self._cluster, None
            await cluster.aclose()
