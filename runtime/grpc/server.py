"""The gRPC server: one for every cache mode, tracing included.

grpcio's synchronous server with the raw-bytes handlers of :func:`method_handlers`: measured
side by side, a stock ``ThreadPoolExecutor`` of a few threads is grpcio's floor per call, and
grpcio's asyncio server costs twice as much (``docs/architecture.md``, "The gRPC path"). Each
call holds a thread of the unary pool (:data:`THREADS`) while it is answered: a memoized
``ModelInfer`` hit on the thread itself, everything else by the service on the event loop
(``loop_bridge``), which the server shares with HTTP through the one runtime. ``ModelStreamInfer``
calls run on a pool of their own (``grpcio_seam``), as many threads as ``--grpc-max-streams``
admits (``stream_cap``) and one more for refusals, so idle streams never take the unary calls';
model loads and unloads likewise, on a pool sized from ``--grpc-max-model-control``
(``control_cap``), so that no number of loads keeps ``ServerLive`` or an inference waiting.
Connections are bounded by gRPC core itself (``connections``): a cap, a handshake deadline, idle
and age limits, and keepalive enforcement.

Built once, here: the handlers (``handlers``), traced when the runtime traces (``traced``), the
streams and model control capped, and with ``--grpc-restricted-protocol`` the one interceptor
(``restricted``) that refuses a call before its request is read.
With ``--workers N`` every worker process binds the same gRPC port with ``SO_REUSEPORT`` and the
kernel spreads connections across them, as uvicorn's shared socket does for HTTP; with one worker
the option is off, so that a port already taken by another server is an error at start instead
of a silent share.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent import futures
from typing import Any

import grpc

from cachefleet.runtime.composition import Runtime
from cachefleet.runtime.config import SecuritySettings
from cachefleet.runtime.errors import ServingError
from cachefleet.runtime.grpc.connections import connection_options
from cachefleet.runtime.grpc.control_cap import CONTROL_METHODS, ControlCap
from cachefleet.runtime.grpc.grpcio_seam import on_own_threads
from cachefleet.runtime.grpc.handlers import Handler, add_handlers
from cachefleet.runtime.grpc.handlers import method_handlers as build_handlers
from cachefleet.runtime.grpc.infer import Inference
from cachefleet.runtime.grpc.loop_bridge import LoopBridge
from cachefleet.runtime.grpc.restricted import RestrictedProtocols
from cachefleet.runtime.grpc.servicer import InferenceServicer
from cachefleet.runtime.grpc.stream_cap import StreamCap
from cachefleet.runtime.grpc.traced import traced_handlers

log = logging.getLogger(__name__)
#: Threads for unary calls: each call holds one while it is answered, so a few more than the
#: concurrency one core serves; past them calls wait their turn in grpcio's queue. More threads
#: cost more per call (measured: ``bench/results/2026-11-28-grpc-server.md``).
THREADS = 4
#: Seconds in-flight calls get to finish when the server stops.
STOP_GRACE_S = 5.0


class GrpcStartError(ServingError):
    """The gRPC port cannot be bound."""


class GrpcServer:
    """grpcio's server and its thread pools; :meth:`stop` on the event loop."""

    def __init__(self, server: grpc.Server, pools: tuple[futures.ThreadPoolExecutor, ...]) -> None:
        self.server = server
        self._pools = pools

    async def stop(self, grace_s: float) -> None:
        """Refuse new calls, let in-flight ones finish for up to ``grace_s`` seconds (the loop
        runs meanwhile: they may be waiting for it)."""
        try:
            await asyncio.to_thread(self.server.stop(grace_s).wait)
        finally:
            for pool in self._pools:
                pool.shutdown(wait=False, cancel_futures=True)


def method_handlers(
    runtime: Runtime, bridge: LoopBridge, streams: StreamCap, control: ControlCap
) -> dict[str, Handler]:
    """Every method's handler: inference on the threads (``infer``), the others on the loop
    (``servicer``); traced when the runtime traces; streams capped by ``streams``, model
    loads and unloads by ``control``."""
    inference = Inference(runtime, bridge)
    servicer = InferenceServicer(runtime)

    def behaviour(name: str) -> Any:
        if name in ("ModelInfer", "ModelStreamInfer"):
            return getattr(inference, name)
        return bridge.unary(getattr(servicer, name))

    handlers = build_handlers(behaviour)
    if runtime.tracing is not None:
        handlers = traced_handlers(handlers, runtime.tracing.tracer)
    return control.capped(streams.capped(handlers))


async def start_grpc_server(runtime: Runtime) -> GrpcServer:
    """Bind ``--grpc-port`` on ``--host`` and serve ``runtime``; call in the event loop."""
    settings, security = runtime.settings.server, runtime.settings.security
    limits = runtime.settings.limits
    options: list[tuple[str, Any]] = [
        ("grpc.max_receive_message_length", settings.max_request_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.so_reuseport", 1 if settings.workers > 1 else 0),
        *connection_options(limits),
    ]
    stream_cap = StreamCap(limits.grpc_max_streams)
    control_cap = ControlCap(limits.grpc_max_model_control)
    bridge = LoopBridge(asyncio.get_running_loop())
    handlers = method_handlers(runtime, bridge, stream_cap, control_cap)
    unary = futures.ThreadPoolExecutor(THREADS, thread_name_prefix="grpc")
    streams = futures.ThreadPoolExecutor(stream_cap.limit + 1, thread_name_prefix="grpc_stream")
    control = futures.ThreadPoolExecutor(control_cap.limit + 1, thread_name_prefix="grpc_control")
    on_own_threads((h for h in handlers.values() if h.stream_stream is not None), streams)
    on_own_threads((handlers[name] for name in CONTROL_METHODS), control)
    restricted = security.grpc_restricted_protocol
    interceptors: list[grpc.ServerInterceptor] = []
    if restricted:
        interceptors.append(RestrictedProtocols(restricted))
    server = grpc.server(unary, interceptors=interceptors, options=options)
    add_handlers(handlers, server)
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
    server.start()
    tls = ""
    if credentials is not None:
        mutual = security.grpc_use_ssl_mutual
        tls = " over TLS" + (" (client certificates required)" if mutual else "")
    log.info("serving gRPC on %s%s", address, tls)
    return GrpcServer(server, (unary, streams, control))


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


async def stop_grpc_server(server: GrpcServer) -> None:
    """Refuse new calls, let in-flight ones finish for up to :data:`STOP_GRACE_S`."""
    await server.stop(STOP_GRACE_S)


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
