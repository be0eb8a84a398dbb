"""``--grpc-restricted-protocol``: one interceptor checks each call's protocol group.

Triton's groups per method (``grpc_server.cc``): the metadata key is
``triton-grpc-protocol-<key>``, and a call without it (or with another value) ends with
``UNAVAILABLE`` and ``This protocol is restricted, expecting header
'triton-grpc-protocol-<key>'``, before the request is read. The interceptor is installed only
when something is restricted, so an open server pays nothing per call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import grpc

from cachefleet.runtime.config import ApiGroup, Restriction, by_group
from cachefleet.runtime.grpc.handlers import Handler, with_behaviour

_SERVICE = "/inference.GRPCInferenceService/"
#: Each method's group, as Triton files them.
GROUPS: dict[str, ApiGroup] = {
    **dict.fromkeys(("ServerLive", "ServerReady", "ModelReady"), "health"),
    **dict.fromkeys(("ServerMetadata", "ModelMetadata"), "metadata"),
    **dict.fromkeys(("ModelInfer", "ModelStreamInfer"), "inference"),
    "ModelConfig": "model-config",
    "ModelStatistics": "statistics",
    **dict.fromkeys(
        ("RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload"), "model-repository"
    ),
    **dict.fromkeys(
        (
            f"{kind}SharedMemory{action}"
            for kind in ("System", "Cuda")
            for action in ("Status", "Register", "Unregister")
        ),
        "shared-memory",
    ),
    "TraceSetting": "trace",
    "LogSettings": "logging",
}


def refusal_message(restriction: Restriction) -> str:
    return f"This protocol is restricted, expecting header '{restriction.grpc_key}'"


class _Checks:
    """Which restriction, if any, refuses a call."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        groups = by_group(restrictions)
        self._by_method = {
            _SERVICE + method: groups[group] for method, group in GROUPS.items() if group in groups
        }

    def refusal(self, details: grpc.HandlerCallDetails) -> str | None:
        """The refusal message for the call ``details`` describes, None when admitted."""
        restriction = self._by_method.get(details.method)
        if restriction is None:
            return None
        key = restriction.grpc_key
        presented = next(
            (value for name, value in details.invocation_metadata or () if name == key), None
        )
        return None if restriction.admits(presented) else refusal_message(restriction)


class RestrictedProtocols(grpc.ServerInterceptor):
    """Refuses calls to a restricted group that lack its metadata, before the request is read."""

    def __init__(self, restrictions: Iterable[Restriction]) -> None:
        self._checks = _Checks(restrictions)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        handler = continuation(handler_call_details)
        refusal = None if handler is None else self._checks.refusal(handler_call_details)
        if refusal is None:
            return handler
        assert handler is not None

        def refuse(request: Any, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAVAILABLE, refusal)

        return with_behaviour(handler, refuse)
