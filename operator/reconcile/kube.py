"""A small Kubernetes API adapter: get, list, server-side apply and delete of child objects.

Built on the official client's ``ApiClient`` (kopf's login configures it), with the URL derived
from ``apiVersion`` and ``kind`` so one code path serves every child kind. Client errors are
translated to :class:`KubeError` here and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s_client

from cachefleet.operator.manifests.meta import MANAGER
from cachefleet.operator.reconcile.metrics import OperatorMetrics

PLURALS: dict[str, str] = {
    "Secret": "secrets",
    "ConfigMap": "configmaps",
    "Service": "services",
    "StatefulSet": "statefulsets",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "NetworkPolicy": "networkpolicies",
    "HorizontalPodAutoscaler": "horizontalpodautoscalers",
    "ScaledObject": "scaledobjects",
    "CachedInferenceService": "cachedinferenceservices",
    "PersistentVolumeClaim": "persistentvolumeclaims",
    "Pod": "pods",
    "Event": "events",
    "KopfPeering": "kopfpeerings",
    "ClusterKopfPeering": "clusterkopfpeerings",
    "Lease": "leases",
}
MERGE_PATCH_CONTENT_TYPE = "application/merge-patch+json"
APPLY_CONTENT_TYPE = "application/apply-patch+yaml"
TIMEOUT_S = 10.0


#: The cause the API server gives when it refuses new objects in a namespace being deleted
#: (``corev1.NamespaceTerminatingCause``, with a 403).
NAMESPACE_TERMINATING = "NamespaceTerminating"


@dataclass(frozen=True)
class Cause:
    """One ``details.causes`` entry of the server's Status: why, and which field."""

    reason: str
    field: str = ""
    message: str = ""


class KubeError(Exception):
    """A failed Kubernetes API call; ``status`` is the HTTP status (0 when none came back),
    ``causes`` the server's ``details.causes`` (which fields a 422 refused, for instance)."""

    def __init__(self, status: int, message: str, causes: tuple[Cause, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.causes = causes

    @property
    def namespace_terminating(self) -> bool:
        """The namespace is being deleted: nothing new may be made there, nothing is to do."""
        return self.status == 403 and any(c.reason == NAMESPACE_TERMINATING for c in self.causes)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def invalid(self) -> bool:
        return self.status == 422

    @property
    def refused(self) -> bool:
        """Forbidden or invalid: the server will refuse the same request again."""
        return self.status in (403, 422)


def single_attempt_client() -> k8s_client.ApiClient:
    """A client of the loaded configuration whose every request is one attempt, for calls that
    must end by a deadline (the Lease's): the client's default, urllib3's ``Retry(3)``, retries a
    read timeout with a fresh timeout each time, so a server that stops answering without closing
    the connection holds one call for four timeouts."""
    configuration = k8s_client.Configuration.get_default_copy()
    configuration.retries = False
    return k8s_client.ApiClient(configuration)


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{PLURALS[kind]}"


def object_path(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{collection_path(obj['apiVersion'], obj['kind'], meta['namespace'])}/{meta['name']}"


class Kube:
    """The calls the operator makes; one instance per process, shared by handler threads."""

    def __init__(
        self,
        api_client: k8s_client.ApiClient | None = None,
        metrics: OperatorMetrics | None = None,
    ) -> None:
        self._client = api_client
        #: Where each request is counted (by verb and code), if anywhere.
        self._metrics = metrics

    @property
    def _api(self) -> k8s_client.ApiClient:
        # Made on first use: kopf's login configures the client after startup handlers ran.
        if self._client is None:
            self._client = k8s_client.ApiClient()
        return self._client

    def get(
        self,
        api_version: str,
        kind: str,
        namespace: str,
        name: str,
        *,
        timeout_s: float = TIMEOUT_S,
    ) -> dict[str, Any] | None:
        path = f"{collection_path(api_version, kind, namespace)}/{name}"
        try:
            return self._call("GET", path, timeout_s=timeout_s)
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def list_labelled(
        self, api_version: str, kind: str, namespace: str, labels: Mapping[str, str]
    ) -> list[dict[str, Any]]:
        """Objects carrying all ``labels`` (filtered here too, in case the server ignores it)."""
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        path = collection_path(api_version, kind, namespace)
        items = self._call("GET", path, query=[("labelSelector", selector)]).get("items") or []
        return [
            item
            for item in items
            if labels.items() <= (item.get("metadata", {}).get("labels") or {}).items()
        ]

    def get_cluster(self, api_version: str, kind: str, name: str) -> dict[str, Any] | None:
        """A cluster-scoped object, or None when there is none."""
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            return self._call("GET", f"{prefix}/{PLURALS[kind]}/{name}")
        except KubeError as error:
            if error.not_found:
                return None
            raise

    def list_events(self, namespace: str, kind: str, name: str) -> list[dict[str, Any]]:
        """The core events about one object (filtered here too, in case the server ignores it)."""
        selector = f"involvedObject.kind={kind},involvedObject.name={name}"
        path = collection_path("v1", "Event", namespace)
        items = self._call("GET", path, query=[("fieldSelector", selector)]).get("items") or []
        return [
            item
            for item in items
            if (item.get("involvedObject") or {}).get("kind") == kind
            and (item.get("involvedObject") or {}).get("name") == name
        ]

    def apply(
        self, obj: Mapping[str, Any], *, manager: str = MANAGER, dry_run: bool = False
    ) -> dict[str, Any]:
        """Server-side apply with the operator's one field manager, taking over conflicts.

        Another ``manager`` is used only to hand a field over (the Deployment's replicas to an
        HPA), as the server-side apply documentation describes. ``dry_run`` asks what the
        server would store, with its defaults and merge, and stores nothing.
        """
        query = [("fieldManager", manager), ("force", "true")]
        if dry_run:
            query.append(("dryRun", "All"))
        return self._call("PATCH", object_path(obj), query=query, body=dict(obj),
                          content_type=APPLY_CONTENT_TYPE)  # fmt: skip

    def create(self, obj: Mapping[str, Any], *, timeout_s: float = TIMEOUT_S) -> dict[str, Any]:
        """Create ``obj``; 409 when it exists (used where a create must not overwrite)."""
        path = collection_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
        return self._call("POST", path, body=dict(obj), timeout_s=timeout_s)

    def merge_patch(
        self, obj: Mapping[str, Any], patch: Mapping[str, Any], *, timeout_s: float = TIMEOUT_S
    ) -> dict[str, Any]:
        """A JSON merge patch of ``obj`` (for objects the operator does not own: a PVC; the
        Lease, where ``metadata.resourceVersion`` in the patch makes the server refuse it with
        409 if the object changed since it was read)."""
        return self._call("PATCH", object_path(obj), body=dict(patch), timeout_s=timeout_s,
                          content_type=MERGE_PATCH_CONTENT_TYPE)  # fmt: skip

    def patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the status subresource (only the fields given)."""
        return self._call("PATCH", f"{object_path(obj)}/status", body={"status": dict(status)},
                          content_type=MERGE_PATCH_CONTENT_TYPE)  # fmt: skip

    def delete(self, obj: Mapping[str, Any], *, orphan: bool = False) -> None:
        """Delete; ``orphan`` keeps the dependents (pods, claims) for a replacement to adopt."""
        body = {"propagationPolicy": "Orphan" if orphan else "Background"}
        try:
            self._call("DELETE", object_path(obj), body=body)
        except KubeError as error:
            if not error.not_found:
                raise

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout_s: float = TIMEOUT_S,
    ) -> dict[str, Any]:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        try:
            status, result = self._request(method, path, query, body, headers, timeout_s)
        except KubeError as error:
            self._count(method, content_type, query, error.status)
            raise
        self._count(method, content_type, query, status)
        return result

    def _count(
        self, method: str, content_type: str, query: list[tuple[str, str]] | None, status: int
    ) -> None:
        if self._metrics is not None:
            self._metrics.request(method, content_type, bool(query), status)

    def _request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None,
        body: Any,
        headers: dict[str, str],
        timeout_s: float,
    ) -> tuple[int, dict[str, Any]]:
        """The server's status code and answer; a KubeError for a failure."""
        try:
            request = self._api.param_serialize(
                method, path, query_params=query or [], header_params=headers, body=body,
                auth_settings=["BearerToken"],
            )  # fmt: skip
            response = self._api.call_api(*request, _request_timeout=timeout_s)
            response.read()  # type: ignore[no-untyped-call]
        except k8s_client.ApiException as error:
            body = error.body if isinstance(error.body, bytes | str) else b""
            raise status_error(error.status or 0, f"{method} {path}", body, error.reason) from None
        except (OSError, urllib3.exceptions.HTTPError) as error:  # refused, reset, timed out
            raise KubeError(0, f"{method} {path}: {error}") from None
        data = response.data or b"{}"
        if not 200 <= response.status < 300:
            raise status_error(response.status, f"{method} {path}", data)
        result: dict[str, Any] = json.loads(data)
        return response.status, result


def status_error(
    status: int, request: str, body: bytes | str, reason: str | None = None
) -> KubeError:
    """A KubeError from the server's answer: its Status message and ``details.causes``."""
    raw = body.encode() if isinstance(body, str) else body
    try:
        document = json.loads(raw) if raw else {}
    except ValueError:
        document = {}
    if not isinstance(document, dict):
        document = {}
    message = document.get("message") or raw[:300].decode(errors="replace") or reason or ""
    details = document.get("details") if isinstance(document.get("details"), dict) else {}
    causes = tuple(
        Cause(str(c.get("reason") or ""), str(c.get("field") or ""), str(c.get("message") or ""))
        for c in (details or {}).get("causes") or []
        if isinstance(c, dict)
    )
    return KubeError(status, f"{request}: {message}", causes)
