"""kopf's HTTP session to the API server, with a bound on its connections.

kopf's own session has none (``TCPConnector(limit=0)``): each request in flight opens a TLS
connection when no idle one is left. Services applied by the hundred put hundreds of kopf's
patches and event posts in flight at once: 400 services had made about 500 connections, each
a handshake for both sides, most closed again within seconds, and a client making 400 requests
at once every 2.5 s grew by about 4 MiB a round (flat with 20 connections). A bounded pool
reuses a few dozen, and a request beyond the bound waits for one: the client-side limit kopf
documents this session for ("Custom HTTP sessions"). (At 1,000 services the operator's peak
memory fell only from 502 to 488 MiB: most of it is elsewhere.)

Each of kopf's watches holds one connection for as long as it streams (one per watched kind and
selector, about a dozen), so the bound leaves room well beyond them.
"""

from __future__ import annotations

import aiohttp
import kopf

#: Connections to the API server kopf may hold at once, its watches included.
API_CONNECTIONS = 64


def bounded_session(
    credentials: kopf.ConnectionInfo, limit: int = API_CONNECTIONS
) -> kopf.AiohttpSession:
    """The session kopf would make from ``credentials`` (its certificates, token and proxy),
    but holding at most ``limit`` connections. Made in kopf's loop (a login handler)."""
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, ssl=credentials.as_ssl_context()),
        headers=credentials.as_http_headers(),
        auth=credentials.as_aiohttp_basic_auth(),
        proxy=credentials.proxy_url,
        trust_env=credentials.trust_env,
    )
    return kopf.AiohttpSession(
        aiohttp_session=session,
        server=credentials.server,
        default_namespace=credentials.default_namespace,
        priority=credentials.priority,
        expiration=credentials.expiration,
    )
