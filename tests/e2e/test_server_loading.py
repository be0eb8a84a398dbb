"""Before the repository is loaded the server is live but not ready: 503 with a message."""

from __future__ import annotations

from pathlib import Path

import httpx

from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.server import create_server


async def test_not_ready_until_loaded(tmp_path: Path) -> None:
    settings = RuntimeSettings.model_validate({"models": {"repository": str(tmp_path)}})
    # Without running the lifespan, the app is exactly as it is while models load.
    transport = httpx.ASGITransport(app=create_server(settings))
    async with httpx.AsyncClient(transport=transport, base_url="http://server") as client:
        assert (await client.get("/v2/health/live")).status_code == 200
        ready = await client.get("/v2/health/ready")
        assert ready.status_code == 503
        assert ready.json() == {"error": "the server is still loading its models"}
        infer = await client.post("/v2/models/simple/infer", content=b"{}")
        assert infer.status_code == 503
        assert (await client.get("/v2/models/simple")).status_code == 503
        assert (await client.get("/metrics")).status_code == 503
