"""Where and how the pipelined connection reaches one Redis node: its own socket, its own hello.

The hot connection (``pipelined``) is opened here with asyncio's own calls, never borrowed from
redis-py: TCP, TLS (certificate and hostname checked against the CA file, or the system's CAs),
or a unix socket. It then says, itself, ``HELLO 2`` with ``AUTH`` and ``SETNAME`` (RESP2 on
that connection whatever a client library defaults to, so Redis sends no push frame there),
falling back to ``AUTH`` and ``CLIENT SETNAME`` on a Redis older than 6 that has no ``HELLO``,
and ``SELECT``s the URL's database. redis-py stays the client for everything else (set-up of the
pool, Cluster, Sentinel's primary lookup) and is asked only through its public API.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio.connection import parse_url

from cachefleet.runtime.config import RedisSettings

Command = tuple[Any, ...]
CLIENT_NAME = "cachefleet"


@dataclass(frozen=True)
class Endpoint:
    """One Redis node and the credentials, database and TLS to use on it."""

    host: str = "localhost"
    port: int = 6379
    #: A unix socket path instead of host and port.
    path: str | None = None
    tls: ssl.SSLContext | None = None
    username: str | None = None
    password: str | None = None
    db: int = 0

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    def at(self, host: str, port: int) -> Endpoint:
        """The same credentials and TLS at another node (Sentinel's primary)."""
        return Endpoint(host, port, None, self.tls, self.username, self.password, self.db)

    def hello(self) -> Command:
        """``HELLO 2``, with ``AUTH`` when there is a password, and the client's name."""
        command: Command = ("HELLO", 2)
        if self.password is not None:
            command += ("AUTH", self.username or "default", self.password)
        return (*command, "SETNAME", CLIENT_NAME)

    def without_hello(self) -> list[Command]:
        """What ``HELLO`` does, for a Redis that has no ``HELLO`` (before 6)."""
        commands: list[Command] = []
        if self.password is not None:
            auth = (self.username, self.password) if self.username else (self.password,)
            commands.append(("AUTH", *auth))
        commands.append(("CLIENT", "SETNAME", CLIENT_NAME))
        return commands

    async def open(
        self, protocol: Callable[[], asyncio.Protocol]
    ) -> tuple[asyncio.BaseTransport, asyncio.Protocol]:
        """A new connection to the node, with ``protocol`` on it."""
        loop = asyncio.get_running_loop()
        if self.path is not None:
            return await loop.create_unix_connection(protocol, self.path)
        server_hostname = self.host if self.tls is not None else None
        return await loop.create_connection(
            protocol, self.host, self.port, ssl=self.tls, server_hostname=server_hostname
        )


def endpoint(settings: RedisSettings) -> Endpoint:
    """The node ``settings.url`` names (for Sentinel: its credentials, to use :meth:`at`)."""
    assert settings.url is not None
    parts = parse_url(settings.url)
    password = parts.get("password")
    if settings.password is not None:
        password = settings.password.get_secret_value()
    return Endpoint(
        host=parts.get("host", "localhost"),
        port=int(parts.get("port", 6379)),
        path=parts.get("path"),
        tls=tls_context(settings) if settings.url.startswith("rediss://") else None,
        username=parts.get("username"),
        password=password,
        db=int(parts.get("db", 0)),
    )


def tls_context(settings: RedisSettings) -> ssl.SSLContext:
    """A client context that checks the server's certificate and name: against the CA file
    when one is given, else the system's CAs; with the client certificate when one is given."""
    ca = None if settings.tls_ca_file is None else str(settings.tls_ca_file)
    context = ssl.create_default_context(cafile=ca)
    if settings.tls_cert_file is not None:
        key = None if settings.tls_key_file is None else str(settings.tls_key_file)
        context.load_cert_chain(str(settings.tls_cert_file), key)
    return context
