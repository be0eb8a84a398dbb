"""What the repository and the models need of an upstream, whichever protocol reaches it.

:func:`connect` chooses the client once, by the URL's scheme: ``grpc://`` / ``grpcs://``
(``grpc_client``: a miss is one ``ModelInfer`` with raw contents) or ``http://`` / ``https://``
(``http_client``: a miss is one POST with the binary tensor extension). Either keeps the
upstream's status and message in its errors (:class:`UpstreamError`), bounds every call by a
deadline, and stops calling an upstream it cannot reach (``breaker``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cachefleet.runtime.config import UpstreamSettings
from cachefleet.runtime.errors import NotReadyError, ServingError
from cachefleet.runtime.models.upstream.breaker import UpstreamBreaker
from cachefleet.runtime.tensor import Tensor


class UpstreamError(ServingError):
    """An error the upstream answered, with the HTTP status that maps back to its gRPC code."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


class UpstreamUnavailableError(NotReadyError):
    """The upstream cannot be reached, or did not answer within its deadline (503,
    ``UNAVAILABLE``)."""


@dataclass(frozen=True, slots=True)
class IndexRow:
    """A row of the upstream's repository index, as it reports it."""

    name: str
    version: str
    state: str
    reason: str


class UpstreamClient(Protocol):
    """Blocking calls to one upstream server; safe to share between threads."""

    #: Whether calls go out at all (read by the ``cachefleet_upstream_circuit_open`` gauge).
    breaker: UpstreamBreaker

    @property
    def target(self) -> str:
        """``host:port``, as messages and logs name the upstream (no credentials)."""
        ...

    def close(self) -> None: ...

    def server_ready(self) -> bool: ...

    def server_identity(self) -> str:
        """The upstream's name and version (``triton 2.51.0``)."""
        ...

    def index(self) -> list[IndexRow]: ...

    def model_versions(self, name: str) -> list[str]:
        """The versions the upstream's metadata of ``name`` lists."""
        ...

    def model_ready(self, name: str, version: str) -> bool: ...

    def model_config(self, name: str, version: str) -> Any:
        """The upstream's ``ModelConfig`` message (tritonclient's generated class)."""
        ...

    def load(self, name: str, config_json: str | None) -> None: ...

    def unload(self, name: str) -> None: ...

    def infer(self, name: str, version: str, inputs: Sequence[Tensor]) -> list[Tensor]:
        """One execution of ``name`` at ``version`` on ``inputs``; every output comes back."""
        ...


def connect(settings: UpstreamSettings) -> UpstreamClient:
    """The client for ``settings.url``'s scheme."""
    url = settings.url or ""
    if url.startswith(("http://", "https://")):
        from cachefleet.runtime.models.upstream.http_client import HttpUpstreamClient

        return HttpUpstreamClient(settings)
    from cachefleet.runtime.models.upstream.grpc_client import GrpcUpstreamClient

    return GrpcUpstreamClient(settings)


def split_url(url: str) -> tuple[str, bool]:
    """``host:port`` of an upstream URL, and whether it is TLS (``grpcs``, ``https``)."""
    scheme, rest = url.split("://", 1)
    return rest.rstrip("/"), scheme in ("grpcs", "https")


def new_breaker(target: str, settings: UpstreamSettings) -> UpstreamBreaker:
    return UpstreamBreaker(target, settings.breaker_failure_threshold, settings.breaker_reset_s)


def auth_metadata(settings: UpstreamSettings) -> tuple[tuple[str, str], ...]:
    """The auth header as ``(name, value)`` pairs: its value from the file (read once, at start,
    without its trailing newline) or from the settings; none when no header is set."""
    if settings.auth_header is None:
        return ()
    if settings.auth_file is not None:
        try:
            value = settings.auth_file.read_text().strip()
        except OSError as error:
            reason = error.strerror or type(error).__name__
            raise ValueError(f"--upstream-auth-file {settings.auth_file}: {reason}") from None
    elif settings.auth_value is not None:
        value = settings.auth_value.get_secret_value()
    else:
        return ()
    return ((settings.auth_header, value),)


def read_file(path: Path | None) -> bytes | None:
    return None if path is None else path.read_bytes()


def unavailable(target: str, what: str) -> UpstreamUnavailableError:
    """The error of a call the breaker refused, or of a deadline that passed."""
    return UpstreamUnavailableError(f"upstream {target} {what}")


#: Words of :func:`unavailable`.
CIRCUIT_OPEN = "is unreachable (circuit open after repeated failures; probing it again)"
