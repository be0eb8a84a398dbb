"""What ``cachefleet serve`` checks before it starts: every start-up failure a user can cause.

A setting that cannot work (a cache mode without its Redis URL, a port another process holds,
a TLS file that cannot be read, a repository that is one model's folder) would otherwise be
found halfway through the start, after the models loaded, as a traceback from the server's
lifespan and exit status 3. Found here first, it is one line naming the flag, and the command
exits 2 like any other usage error. Each check raises :class:`PreflightError`; the command
prints it. (A port taken between this check and the server's bind still fails the start: the
check makes the common case clear, it does not reserve the port.)
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from cachefleet.runtime.cache.errors import CacheConfigError
from cachefleet.runtime.cache.factory import check_cache_settings
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.models.single_model import holds_one_model


class PreflightError(ValueError):
    """A setting the server cannot start with; the message names its flag."""


def check_startup(settings: RuntimeSettings) -> None:
    """Raise PreflightError for the first setting the server could not start with."""
    _check_repository(settings)
    try:
        check_cache_settings(settings)
    except CacheConfigError as error:
        raise PreflightError(str(error)) from None
    _check_files(settings)
    _check_ports(settings)


def _check_repository(settings: RuntimeSettings) -> None:
    repository = settings.models.repository
    upstream = settings.upstream
    if upstream.url is not None:
        if repository is not None:
            raise PreflightError(
                "--upstream serves the upstream's models: leave --model-repository out (the "
                "upstream's own folder, when shared, is --upstream-model-repository)"
            )
        shared = upstream.model_repository
        if shared is not None and not shared.is_dir():
            raise PreflightError(f"--upstream-model-repository {shared}: not a folder")
        return
    if repository is None:
        raise PreflightError(
            "--model-repository is required "
            "(or CACHEFLEET_MODEL_REPOSITORY, or model-repository in the --config file)"
        )
    if not repository.is_dir():
        raise PreflightError(f"--model-repository {repository}: model repository is not a folder")
    if settings.models.name is None and holds_one_model(repository):
        raise PreflightError(
            f"--model-repository {repository} is one model's folder (it holds its "
            "config.pbtxt or model.onnx), not a repository of model folders: pass the folder "
            "above it, or add --model-name NAME to serve it alone"
        )


def _check_files(settings: RuntimeSettings) -> None:
    """Every file a flag names can be read; the HTTP certificate and key load together."""
    security, redis = settings.security, settings.redis
    named = {
        "--ssl-certfile": security.ssl_certfile,
        "--ssl-keyfile": security.ssl_keyfile,
        "--grpc-server-cert": security.grpc_server_cert,
        "--grpc-server-key": security.grpc_server_key,
        "--grpc-root-cert": security.grpc_root_cert,
        "--redis-tls-ca-file": redis.tls_ca_file,
        "--redis-tls-cert-file": redis.tls_cert_file,
        "--redis-tls-key-file": redis.tls_key_file,
        "--upstream-auth-file": settings.upstream.auth_file,
        "--upstream-tls-ca-file": settings.upstream.tls_ca_file,
        "--upstream-tls-cert-file": settings.upstream.tls_cert_file,
        "--upstream-tls-key-file": settings.upstream.tls_key_file,
    }
    for flag, path in named.items():
        if path is not None:
            _readable(flag, path)
    if security.ssl_certfile is not None and security.ssl_keyfile is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(security.ssl_certfile, security.ssl_keyfile)
        except (ssl.SSLError, OSError) as error:
            raise PreflightError(
                f"--ssl-certfile {security.ssl_certfile} / --ssl-keyfile "
                f"{security.ssl_keyfile}: not a certificate and its key ({error})"
            ) from None


def _readable(flag: str, path: Path) -> None:
    try:
        with path.open("rb") as file:
            file.read(1)
    except OSError as error:
        raise PreflightError(f"{flag} {path}: cannot read it ({error.strerror})") from None


def _check_ports(settings: RuntimeSettings) -> None:
    """The HTTP and gRPC ports are free on ``--host`` (and not one port for both)."""
    server = settings.server
    ports = {"--port": server.port}
    if server.grpc_port:
        ports["--grpc-port"] = server.grpc_port
        if server.grpc_port == server.port and server.port:
            raise PreflightError(f"--port and --grpc-port are both {server.port}")
    for flag, port in ports.items():
        if port:
            _bindable(flag, server.host, port)


def _bindable(flag: str, host: str, port: int) -> None:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as error:
        raise PreflightError(f"--host {host}: cannot listen there ({error.strerror})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the servers bind
        try:
            probe.bind(address)
        except OSError as error:
            raise PreflightError(
                f"{flag} {port}: cannot listen on {host}:{port} ({error.strerror}; "
                "another server there?)"
            ) from None
