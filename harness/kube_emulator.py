"""A kmock Kubernetes emulator closer to a real API server, for running the operator against.

kmock stores bodies as sent. A real server also assigns uid, resourceVersion, generation (for
the kinds that keep one), creationTimestamp and generateName names, takes the namespace from
the URL, creates an object on a server-side apply to a missing name, answers 422 when a
JSON-patch ``test`` fails, treats a merge or apply that changes nothing as a no-op (same
resourceVersion, no watch event), merges an apply's ownerReferences by uid and refuses two
controller references (422), refuses a change to an immutable ConfigMap's data, and lists and
watches only the objects a ``labelSelector`` selects (equality and existence terms; a set-based
term, which a real server reads, is refused with 400 here rather than ignored). This subclass
adds exactly that (the operator is not changed for the emulator); each of these behaviours is
checked against a real kube-apiserver in ``tests/cluster/test_cluster_api_server.py``. What it
does not do (field ownership conflicts, garbage collection, controllers, admission, RBAC) the
cluster tests (``tests/cluster/``) see on the real control plane.

The operator's fast tests and ``python -m harness.operator_scale`` run the operator against it;
kmock is a development dependency, so this module is only imported by them (and is not part of
the wheel).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import datetime
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml
from kmock._internal import rendering

APPLY = "application/apply-patch+yaml"
CIS = "cachefleet.io/v1alpha1/cachedinferenceservices"
#: The kinds served. ``generation``: the API server keeps a ``metadata.generation`` for the kind
#: (moved by spec changes only); ConfigMaps, Secrets, Services, Events, Namespaces and the HPA
#: have none, so only their resourceVersion tells a change (checked against kube-apiserver 1.35:
#: tests/cluster/test_cluster_api_server.py).
RESOURCES: dict[str, dict[str, Any]] = {
    CIS: {"kind": "CachedInferenceService", "subresources": {"status"}, "generation": True},
    "v1/namespaces": {"kind": "Namespace", "namespaced": False},
    "v1/events": {"kind": "Event"},
    "v1/secrets": {"kind": "Secret"},
    "v1/configmaps": {"kind": "ConfigMap"},
    "v1/services": {"kind": "Service"},
    "v1/pods": {"kind": "Pod", "subresources": {"status"}, "generation": True},
    "apps/v1/statefulsets": {"kind": "StatefulSet", "subresources": {"status"}, "generation": True},
    "apps/v1/deployments": {"kind": "Deployment", "subresources": {"status"}, "generation": True},
    "apps/v1/replicasets": {"kind": "ReplicaSet", "subresources": {"status"}, "generation": True},
    "policy/v1/poddisruptionbudgets": {"kind": "PodDisruptionBudget", "generation": True},
    "networking.k8s.io/v1/networkpolicies": {"kind": "NetworkPolicy", "generation": True},
    "autoscaling/v2/horizontalpodautoscalers": {"kind": "HorizontalPodAutoscaler"},
    # KEDA's CRD (a cluster without KEDA: drop it from ``resources`` after construction).
    "keda.sh/v1alpha1/scaledobjects": {
        "kind": "ScaledObject", "subresources": {"status"}, "generation": True},
}  # fmt: skip
#: The plurals whose objects carry a generation.
GENERATION_PLURALS = frozenset(
    path.rsplit("/", 1)[-1] for path, info in RESOURCES.items() if info.get("generation")
)
VERBS = {"get", "list", "watch", "create", "patch", "delete"}
#: Set while the emulator serves a request (in that request's task): see ``Cluster.__iter__``.
_SERVING: contextvars.ContextVar[bool] = contextvars.ContextVar("serving", default=False)


@attrs.frozen
class InvalidError(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "a JSON-patch test operation failed"


@attrs.frozen
class ImmutableError(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "ConfigMap: Forbidden: field is immutable when `immutable` is set"


@attrs.frozen
class OwnerReferencesError(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "metadata.ownerReferences: Only one reference can have Controller set to true"


#: The cause the API server names for a changed uid (``details.causes``).
UID_CAUSE = {"reason": "FieldValueInvalid", "field": "metadata.uid", "message": "immutable"}


@attrs.frozen
class UidConflictError(kmock.KubernetesError):
    status: int = 409
    reason: str = "Conflict"
    message: str = (
        "uid mismatch: the provided object specified a uid, and no existing object was found"
    )


@attrs.frozen
class UidChangedError(kmock.KubernetesError):
    status: int = 422
    reason: str = "Invalid"
    message: str = "metadata.uid: Invalid value: field is immutable"
    details: Any = attrs.field(factory=lambda: {"causes": [UID_CAUSE]})


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """The emulator plus server-assigned metadata, apply-creates and JSON-patch tests."""

    _version: int = attrs.field(default=0, init=False)
    #: Requests served so far (kept when ``forget_requests`` drops them from the request log).
    handled: int = attrs.field(default=0, init=False)
    #: Keep no log of requests at all (the scale benchmark: memory stays flat over a long run).
    #: Tests that inspect requests (``cluster["patch"]``, ``len(cluster)``) leave it off.
    forget_requests: bool = False
    #: Seconds each watch event of a resource (by plural) reaches its watchers after its write:
    #: a busy API server's lag, which the operator's watches must survive.
    watch_lag_s: dict[str, float] = attrs.field(factory=dict)
    #: Every request, in arrival order, for the tests to read (see ``__iter__``).
    _log: list[rendering.Request] = attrs.field(factory=list, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        for path, info in RESOURCES.items():
            self.resources[path] = kmock.ResourceInfo(
                kind=info["kind"],
                namespaced=info.get("namespaced", True),
                verbs=VERBS,
                subresources=info.get("subresources", set()),
            )

    def __iter__(self) -> Iterator[rendering.Request]:
        """The requests a reader sees: every one so far to a test, only those in flight to kmock
        while it serves one.

        kmock decides which reaction answers a request by walking each reaction's filter over
        its whole request log (``request in view``), so with every answered request kept there a
        request costs time in proportion to all before it, and a test of a few thousand
        requests spent most of its time in that walk. While a request is served the walk sees
        only the requests still in flight (the one it looks for among them); nothing here
        depends on an older one (no slice or count-limited reaction is used against this
        emulator), so the same reaction answers. A test reading ``cluster["patch"]`` outside a
        request still sees them all.
        """
        if _SERVING.get():
            yield from self._requests
        else:
            yield from self._log

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """Log the request for the tests, serve it, and take it out of kmock's log of those in
        flight once answered."""
        self.handled += 1
        if not self.forget_requests:
            self._log.append(request)
        token = _SERVING.set(True)
        try:
            return await self._serve(request)
        finally:
            _SERVING.reset(token)
            self._forget(request)

    async def _serve(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """One request, answered as a real API server would (subclasses add their rules here)."""
        if request.resource is not None and isinstance(request.data, dict | list):
            if request.action == kmock.action.CREATE and isinstance(request.data, dict):
                _check_one_controller(request.data)
                self._stamp_new(request.data, request.namespace, request.resource.plural)
            elif request.action == kmock.action.UPDATE and request.name is not None:
                self._check_immutable(request)
                self._merge_owner_references(request)
                unchanged = self._unchanged(request)
                if unchanged is not None:
                    return aiohttp.web.json_response(unchanged)
                await self._prepare_update(request)
        return await super()._handle(request)

    def _forget(self, request: rendering.Request) -> None:
        for index, logged in enumerate(self._requests):
            if logged is request:
                del self._requests[index]
                return

    def _stamp_new(self, body: dict[str, Any], namespace: str | None, plural: str | None) -> None:
        meta = body.setdefault("metadata", {})
        if namespace and not meta.get("namespace"):
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        if plural in GENERATION_PLURALS:
            meta.setdefault("generation", 1)
        meta["resourceVersion"] = self._next()

    async def _prepare_update(self, request: rendering.Request) -> None:
        assert request.resource is not None
        assert request.name is not None
        key = (request.resource, request.namespace, request.name)
        live = self._live(key)
        content_type = request.headers.get("Content-Type", "")
        sent_uid = (
            (request.data.get("metadata") or {}).get("uid")
            if isinstance(request.data, dict)
            else None
        )
        if sent_uid is not None and content_type.startswith(APPLY):
            # An apply naming a uid applies to that object only (handlers/patch.go: "uid
            # mismatch"; a changed uid is refused by the metadata validation).
            if live is None:
                raise UidConflictError()
            if live.get("metadata", {}).get("uid") != sent_uid:
                raise UidChangedError()
        if live is None and content_type.startswith(APPLY) and isinstance(request.data, dict):
            body = copy.deepcopy(request.data)
            self._stamp_new(body, request.namespace, request.resource.plural)
            async with self._lock:
                self._objects[key] = body
                await self._buses[request.resource].put({"type": "ADDED", "object": body})
            return
        if live is None:
            return  # the emulator answers 404
        if isinstance(request.data, list):
            _check_tests(live, request.data)
            request.data.append(
                {"op": "add", "path": "/metadata/resourceVersion", "value": self._next()}
            )
            return
        meta = request.data.setdefault("metadata", {})
        meta["resourceVersion"] = self._next()
        spec_changed = "spec" in request.data and request.data["spec"] != live.get("spec")
        generation = live.get("metadata", {}).get("generation")
        if request.subresource is None and spec_changed and generation is not None:
            meta["generation"] = int(generation) + 1

    def _check_immutable(self, request: rendering.Request) -> None:
        """Refuse, as the API server does, a change to an immutable ConfigMap's or Secret's
        data (or to its ``immutable``): it must be replaced under a new name."""
        if request.subresource is not None:
            return
        live = self._live((request.resource, request.namespace, request.name))
        if live is None or live.get("immutable") is not True:
            return
        if isinstance(request.data, list):
            changed = jsonpatch.apply_patch(copy.deepcopy(live), request.data)
        else:
            changed = _merge(copy.deepcopy(live), request.data)
        fields = ("immutable", "data", "binaryData")
        if any(changed.get(f) != live.get(f) for f in fields):
            raise ImmutableError()

    def _merge_owner_references(self, request: rendering.Request) -> None:
        """Merge an apply's ``ownerReferences`` into the live ones by uid, as server-side apply
        does (the list is a map keyed by uid: each field manager keeps its own entries), and
        refuse, as the API server's validation does, an object left with two controllers."""
        if request.subresource is not None or not isinstance(request.data, dict):
            return
        content_type = request.headers.get("Content-Type", "")
        live = self._live((request.resource, request.namespace, request.name))
        sent = (request.data.get("metadata") or {}).get("ownerReferences")
        if live is None:
            _check_one_controller(request.data)
            return
        if sent is None:
            return
        result = sent
        if content_type.startswith(APPLY):
            by_uid = {
                r.get("uid"): r for r in live.get("metadata", {}).get("ownerReferences") or []
            }
            by_uid.update({r.get("uid"): r for r in sent})
            result = list(by_uid.values())
            request.data["metadata"]["ownerReferences"] = result
        _check_one_controller({"metadata": {"ownerReferences": result}})

    def _unchanged(self, request: rendering.Request) -> dict[str, Any] | None:
        """The live object when a merge patch or apply would leave it as it is, else None."""
        if not isinstance(request.data, dict) or request.subresource is not None:
            return None
        live = self._live((request.resource, request.namespace, request.name))
        if live is None:
            return None
        merged = _merge(copy.deepcopy(live), request.data)
        return live if merged == live else None

    def _live(self, key: Any) -> dict[str, Any] | None:
        try:
            obj = self._objects[key]
        except KeyError:
            return None
        return None if obj.deleted else dict(obj.raw)

    def _next(self) -> str:
        self._version += 1
        return str(self._version)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        selector = label_selector(request.params.get("labelSelector"))
        listing = await super()._serve_list(request)
        assert isinstance(listing, dict)
        listing["metadata"] = {"resourceVersion": str(self._version)}
        listing["items"] = [item for item in listing["items"] if selector(item)]
        return listing

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        """Subscribe before taking the snapshot, and honour ``resourceVersion``.

        kmock snapshots first and subscribes later, so a write in between is lost, and it replays
        every object on each watch, so a watch resumed after a list sees stale versions.
        """
        selector = label_selector(request.params.get("labelSelector"))
        yield b""
        assert request.resource is not None
        bus = self._buses[request.resource]
        mark = await bus.mark()
        seen: dict[tuple[str | None, str | None], int] = {}
        since = _version_of(request.params.get("resourceVersion"))
        try:
            async with self._lock:
                snapshot = [
                    obj.raw
                    for (resource, namespace, _), obj in self._objects.items()
                    if resource == request.resource
                    and request.namespace in (None, namespace)
                    and not obj.deleted
                ]
            for raw in snapshot:
                if selector(raw) and _fresh(raw, seen, since):
                    yield {"type": "ADDED", "object": raw}
            events = bus.stream(since=mark)
            lag_s = self.watch_lag_s.get(request.resource.plural or "", 0.0)
            async for event in _lagging(events, lag_s) if lag_s else events:
                raw = event.get("object", {})
                namespace = raw.get("metadata", {}).get("namespace")
                if request.namespace not in (None, namespace) or not selector(raw):
                    continue
                if event.get("type") == "DELETED" or _fresh(raw, seen, since):
                    yield event
        finally:
            await bus.unmark(mark)


async def _lagging(events: AsyncIterator[Any], lag_s: float) -> AsyncIterator[Any]:
    """``events``, each ``lag_s`` after it came (pulled as they come, so a burst is not spread
    out: every event is late by the same time)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, Any]] = asyncio.Queue()

    async def pull() -> None:
        async for event in events:
            queue.put_nowait((loop.time() + lag_s, event))

    puller = asyncio.create_task(pull())
    try:
        while True:
            due, event = await queue.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            yield event
    finally:
        puller.cancel()


@attrs.frozen
class SelectorError(kmock.KubernetesError):
    status: int = 400
    reason: str = "BadRequest"
    message: str = "unable to parse the label selector (set-based terms are not emulated)"


def label_selector(text: str | None) -> Callable[[dict[str, Any]], bool]:
    """Whether an object carries the labels a selector asks for: ``k=v``, ``k==v``, ``k!=v``,
    ``k`` and ``!k`` terms joined by commas, as the API server reads them."""
    terms: list[tuple[str, str, str]] = []  # (operator, key, value)
    for term in (t.strip() for t in (text or "").split(",")):
        if not term:
            continue
        if " in " in term or " notin " in term or "(" in term:
            raise SelectorError()
        if "!=" in term:
            key, value = term.split("!=", 1)
            terms.append(("!=", key.strip(), value.strip()))
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            terms.append(("=", key.strip(), value.strip()))
        elif term.startswith("!"):
            terms.append(("absent", term[1:].strip(), ""))
        else:
            terms.append(("present", term, ""))

    def holds(labels: dict[str, str], operator: str, key: str, value: str) -> bool:
        if operator == "=":
            return labels.get(key) == value
        if operator == "!=":
            return labels.get(key) != value
        return (key in labels) == (operator == "present")

    def selects(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(holds(labels, *term) for term in terms)

    return selects


def _merge(target: Any, patch: Any) -> Any:
    """A recursive merge as the emulator stores it (lists replaced, None deletes)."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return copy.deepcopy(patch)
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def _version_of(value: Any) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else 0


def _fresh(raw: dict[str, Any], seen: dict[tuple[str | None, str | None], int], since: int) -> bool:
    """Whether this version of an object is newer than what the watcher has seen."""
    meta = raw.get("metadata", {})
    key = (meta.get("namespace"), meta.get("name"))
    version = _version_of(meta.get("resourceVersion"))
    if version and (version <= since or version <= seen.get(key, 0)):
        return False
    seen[key] = version
    return True


def _check_one_controller(body: dict[str, Any]) -> None:
    references = (body.get("metadata") or {}).get("ownerReferences") or []
    controllers = [r for r in references if isinstance(r, dict) and r.get("controller")]
    if len(controllers) > 1:
        names = ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in controllers)
        raise OwnerReferencesError(
            message="metadata.ownerReferences: Invalid value: Only one reference can have "
            f'Controller set to true. Found "true" in references for {names}'
        )


def _check_tests(live: dict[str, Any], operations: list[Any]) -> None:
    tests = [op for op in operations if isinstance(op, dict) and op.get("op") == "test"]
    try:
        jsonpatch.apply_patch(copy.deepcopy(live), tests)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException):
        raise InvalidError() from None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_kubeconfig(folder: Path, url: str) -> Path:
    """A kubeconfig in ``folder`` for the emulator at ``url`` (any token: it checks none)."""
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": url.rstrip("/")}}],
        "users": [{"name": "kmock", "user": {"token": "emulator"}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}],
    }))  # fmt: skip
    return path


@contextlib.asynccontextmanager
async def served(emulator: Cluster, folder: Path) -> AsyncIterator[tuple[str, Path]]:
    """``emulator`` served over HTTP on loopback for the block: its URL, and a kubeconfig for it
    in ``folder`` (for an operator process, or the Kubernetes client)."""
    async with emulator, kmock.Server(emulator):
        url = str(emulator.url).rstrip("/")
        yield url, write_kubeconfig(folder, url)
