"""kopf's session to the API server holds a bounded number of connections (``api_session``):
a burst of requests reuses them instead of opening one per request in flight."""

from __future__ import annotations

import asyncio

import aiohttp.web
import kopf

from cachefleet.operator.api_session import API_CONNECTIONS, bounded_session


async def test_a_burst_of_requests_shares_the_bounded_connections_and_carries_the_token() -> None:
    peers: set[object] = set()
    tokens: set[str | None] = set()
    in_flight = 0
    most = 0

    async def answer(request: aiohttp.web.Request) -> aiohttp.web.Response:
        nonlocal in_flight, most
        peers.add(request.transport.get_extra_info("peername") if request.transport else None)
        tokens.add(request.headers.get("Authorization"))
        in_flight += 1
        most = max(most, in_flight)
        await asyncio.sleep(0.02)
        in_flight -= 1
        return aiohttp.web.json_response({"kind": "Status"})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    credentials = kopf.ConnectionInfo(
        server=f"http://127.0.0.1:{port}", scheme="Bearer", token="t0k3n", default_namespace="ml"
    )
    made = bounded_session(credentials)
    try:
        assert made.server == credentials.server
        assert made.default_namespace == "ml"

        async def one(index: int) -> int:
            async with made.aiohttp_session.patch(f"{credentials.server}/x/{index}") as response:
                await response.read()
                return response.status

        statuses = await asyncio.gather(*(one(i) for i in range(4 * API_CONNECTIONS)))
    finally:
        await made.aiohttp_session.close()
        await runner.cleanup()

    assert statuses == [200] * (4 * API_CONNECTIONS)  # every request answered, none dropped
    assert len(peers) <= API_CONNECTIONS
    assert most <= API_CONNECTIONS
    assert tokens == {"Bearer t0k3n"}
