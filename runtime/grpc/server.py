"""The gRPC server's life: started once the runtime is open, stopped before it closes.

With a local tier (``--cache local`` or ``tiered``) it is grpcio's synchronous server, which
answers repeated local hits on its own threads (``threaded_server``); otherwise grpcio's asyncio
server. Either way every call but those hits is the asyncio servicer's, and open streams are
capped by ``--grpc-max-streams`` (``stream_cap``): the cap is made here, and the threaded server
sizes its threads from it.

It runs in the same event loop as HTTP and receives the same runtime, so both transports share
one service.
With ``--workers N`` every worker process binds the same gRPC port with ``SO_REUSEPORT`` and the
kernel spreads connections across them, as uvicorn's shared socket does for HTTP; with one worker
the option is off, so that a port already taken by another server is an error at start instead
of a silent share.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import SecuritySettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc import threaded_server
from cachefleet.runtime.grpc.handlers import add_handlers, method_handlers
from cachefleet.runtime.grpc.restricted import RestrictedProtocols, ThreadedRestrictedProtocols
from cachefleet.runtime.grpc.servicer import InferenceServicer
from cachefleet.runtime.grpc.stream_cap import StreamCap
from cachefleet.runtime.grpc.traced import TraceContextInterceptor

log = logging.getLogger(__name__)
#: grpcio's asyncio server, or its synchronous one (``threaded_server``, with a local tier).
Server = grpc.aio.Server | threaded_server.ThreadedServer
#: Seconds in-flight calls get to finish when the server stops.
STOP_GRACE_S = 5.0


class GrpcStartError(ServingError):
    """The gRPC port cannot be bound."""


async def start_grpc_server(runtime: Runtime) -> Server:
    """Bind ``--grpc-port`` on ``--host`` and serve ``runtime``; call in the event loop.

    With ``--grpc-restricted-protocol`` an interceptor checks each call's group first; when
    the runtime traces, another traces each inference call.
    """
    settings, security = runtime.settings.server, runtime.settings.security
    limit = settings.max_request_bytes
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),
    ]
    restricted = security.grpc_restricted_protocol
    cap = StreamCap(runtime.settings.limits.grpc_max_streams)
    server: Server
    if threaded_server.serves(runtime):
        threaded: list[Any] = [ThreadedRestrictedProtocols(restricted)] if restricted else []
        server = await threaded_server.threaded_server(runtime, options, threaded, cap)
    else:
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if restricted:
            interceptors.append(RestrictedProtocols(restricted))
        if runtime.tracing is not None:  # after the restriction: a refused call is not answered
            interceptors.append(TraceContextInterceptor(runtime.tracing.tracer))
        server = grpc.aio.server(options=options, interceptors=interceptors)
        add_handlers(cap.asynchronous(method_handlers(InferenceServicer(runtime))), server)
    address = _address(settings.host, settings.grpc_port)
    credentials = _credentials(security) if security.grpc_use_ssl else None
    try:
        if credentials is None:
            server.add_insecure_port(address)
        else:
            server.add_secure_port(address, credentials)
    except RuntimeError as error:
        raise GrpcStartError(
            f"cannot listen for gRPC on {address} (--grpc-port; in use?): {error}"
        ) from None
    await server.start()
    tls = ""
    if credentials is not None:
        mutual = security.grpc_use_ssl_mutual
        tls = " over TLS" + (" (client certificates required)" if mutual else "")
    log.info("serving gRPC on %s%s", address, tls)
    return server


def _credentials(security: SecuritySettings) -> grpc.ServerCredentials:
    """Triton's ``--grpc-use-ssl``: the server's certificate and key, and with
    ``--grpc-use-ssl-mutual`` clients must present a certificate ``--grpc-root-cert`` signed."""
    assert security.grpc_server_cert is not None  # the settings require both with ssl
    assert security.grpc_server_key is not None
    files = {
        "--grpc-server-cert": security.grpc_server_cert,
        "--grpc-server-key": security.grpc_server_key,
    }
    if security.grpc_root_cert is not None:
        files["--grpc-root-cert"] = security.grpc_root_cert
    read: dict[str, bytes] = {}
    for flag, path in files.items():
        try:
            read[flag] = path.read_bytes()
        except OSError as error:
            raise GrpcStartError(f"cannot read {flag} {path}: {error.strerror}") from None
    return grpc.ssl_server_credentials(
        [(read["--grpc-server-key"], read["--grpc-server-cert"])],
        root_certificates=read.get("--grpc-root-cert"),
        require_client_auth=security.grpc_use_ssl_mutual,
    )


async def stop_grpc_server(server: Server) -> None:
    """Refuse new calls, let in-flight ones finish for up to :data:`STOP_GRACE_S` (the event
    loop keeps running meanwhile: the threaded server's calls may be waiting for it)."""
    await server.stop(STOP_GRACE_S)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
