"""The emulator with Leases, as strict about them as a real API server.

kmock takes any update; a real server refuses one that names a resourceVersion other than the
object's current one (409 Conflict). Leader election rests on that refusal, so the leader
election tests run against an emulator that makes it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import rendering

from support.kube.cluster import VERBS, Cluster

LEASES = "coordination.k8s.io/v1/leases"


@attrs.frozen
class ConflictError(kmock.KubernetesError):
    status: int = 409
    reason: str = "Conflict"
    message: str = "the object has been modified; please apply your changes to the latest version"


@attrs.define(kw_only=True)
class LeaseCluster(Cluster):
    """Leases served, and an update naming a stale resourceVersion answered 409."""

    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock, init=False)
    #: Lease updates refused as stale, for tests to see that the check was exercised.
    conflicts: int = attrs.field(default=0, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.resources[LEASES] = kmock.ResourceInfo(
            kind="Lease", namespaced=True, verbs=VERBS, subresources=set()
        )

    async def _serve(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if getattr(request.resource, "plural", None) != "leases":
            return await super()._serve(request)
        async with self._writes:  # the check and the write as one step, as etcd does
            if self._stale(request):
                self.conflicts += 1
                return await self._render_error(ConflictError())
            return await super()._serve(request)

    def _stale(self, request: rendering.Request) -> bool:
        if request.action != kmock.action.UPDATE or not isinstance(request.data, dict):
            return False
        named = (request.data.get("metadata") or {}).get("resourceVersion")
        live: dict[str, Any] | None = self._live(
            (request.resource, request.namespace, request.name)
        )
        if named is None or live is None:
            return False
        return str(named) != str((live.get("metadata") or {}).get("resourceVersion"))
