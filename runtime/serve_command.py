"""`cachefleet serve`: run the inference server.

Every flag also reads ``CACHEFLEET_<FLAG>`` and the ``--config`` YAML file (see
``cachefleet.runtime.config``). With ``--workers N`` each worker process loads every model and
keeps its own metrics registry, so ``/metrics`` shows the figures of the worker that answered.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any, cast

HELP = "run the inference server."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cachefleet.runtime.config import add_flags

    add_flags(parser)


def run(args: argparse.Namespace) -> int:
    from cachefleet.runtime.config import SettingsError, load_settings
    from cachefleet.runtime.preflight import PreflightError, check_startup

    try:
        settings = load_settings(args)
        check_startup(settings)
    except (SettingsError, PreflightError) as error:
        # One line naming the flag, and argparse's status for a usage error; before the web
        # framework and the server are imported, so that a bad start fails at once.
        print(f"cachefleet serve: error: {error}", file=sys.stderr)
        return 2
    import uvicorn

    from cachefleet.runtime.descriptors import fit_connection_caps
    from cachefleet.runtime.http.environment import configure_logging, export_settings
    from cachefleet.runtime.server import create_server

    server = settings.server
    configure_logging(server.log_level)
    try:
        settings = fit_connection_caps(settings)  # the caps within the raised nofile limit
    except SettingsError as error:
        print(f"cachefleet serve: {error}", file=sys.stderr)
        return 2
    app: Any
    if server.workers > 1:
        export_settings(settings, os.environ)
        app = "cachefleet.runtime.server:create_server_from_environment"
    else:
        app = create_server(settings)
    uvicorn.run(
        app,
        factory=server.workers > 1,
        workers=server.workers,
        host=server.host,
        port=server.port,
        log_level=server.log_level,
        log_config=None,
        access_log=False,  # no per-request logging: it would cost more than a cache hit
        ws="none",  # no WebSocket route: nothing to import a WebSocket implementation for
        proxy_headers=False,  # client addresses are never used, so skip X-Forwarded-* parsing
        server_header=False,
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http=_http_protocol(),
        # uvicorn types it int, but only hands it to call_later: a fraction of a second works.
        timeout_keep_alive=cast(int, settings.limits.keep_alive_timeout_s),
        timeout_graceful_shutdown=10,
        # With --workers N, uvicorn's supervisor kills a worker that does not answer its ping in
        # time, and its default (5 s) is shorter than a worker's imports on a busy node: every
        # new worker was killed before it started, for as long as the node stayed busy.
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_TIMEOUT_S,
        ssl_certfile=_path(settings.security.ssl_certfile),
        ssl_keyfile=_path(settings.security.ssl_keyfile),
    )
    return 0


#: How long a worker may take to answer the supervisor's ping (see ``run``).
WORKER_HEALTHCHECK_TIMEOUT_S = 60


def _path(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _http_protocol() -> type[asyncio.Protocol]:
    """httptools (with a response's head and body in one write) when installed, else h11;
    either with the deadlines and connection cap of the settings' limits."""
    if importlib.util.find_spec("httptools") is None:
        from cachefleet.runtime.http.uvicorn_protocol import GuardedH11Protocol

        return GuardedH11Protocol
    from cachefleet.runtime.http.uvicorn_protocol import GuardedHttpToolsProtocol

    return GuardedHttpToolsProtocol
