"""Names, labels, owner references and config hashes shared by every child object."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the spec model (pydantic) costs 0.4 s to import
    from cachefleet.operator.manifests.spec import ServiceSpec

GROUP = "cachefleet.io"
VERSION = "v1alpha1"
KIND = "CachedInferenceService"
PLURAL = "cachedinferenceservices"
MANAGER = "cachefleet-operator"
APP_NAME = "cachefleet"
CONFIG_HASH_ANNOTATION = "cachefleet.io/config-hash"
#: On the runtime Deployment: a digest of the pod template the operator last applied to it.
TEMPLATE_HASH_ANNOTATION = "cachefleet.io/template-hash"
#: The cluster autoscaler keeps a node whose pods have local volumes (emptyDir) unless each such
#: volume is named here (cluster-autoscaler FAQ, "What types of pods can prevent CA from removing
#: a node?"); a GPU node would never scale down.
SAFE_TO_EVICT_LOCAL_VOLUMES = "cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"
# Where the chart installs the operator; the running operator passes its own namespace instead.
DEFAULT_OPERATOR_NAMESPACE = "cachefleet-system"
REDIS_PORT = 6379
RUNTIME_PORT = 8000
#: The runtime's gRPC endpoint (Triton's port), exposed beside HTTP by the pods and the Service.
RUNTIME_GRPC_PORT = 8001


@dataclass(frozen=True)
class Owner:
    """The CachedInferenceService that owns the children; uid is None when rendering a file."""

    name: str
    namespace: str
    uid: str | None = None

    @classmethod
    def from_body(cls, body: Any) -> Owner:
        meta = body.get("metadata", {})
        return cls(meta["name"], meta.get("namespace") or "default", meta.get("uid"))

    def reference(self) -> dict[str, Any]:
        assert self.uid is not None
        return {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def selector_labels(owner: Owner, component: str) -> dict[str, str]:
    """The labels that select one component's pods; never change them (selectors are immutable)."""
    return {
        "app.kubernetes.io/name": APP_NAME,
        "app.kubernetes.io/instance": owner.name,
        "app.kubernetes.io/component": component,
    }


def labels(owner: Owner, component: str) -> dict[str, str]:
    return {**selector_labels(owner, component), "app.kubernetes.io/managed-by": MANAGER}


def metadata(owner: Owner, name: str, component: str) -> dict[str, Any]:
    """Child metadata: namespace, labels and, when the owner is known, the controller reference."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner.namespace,
        "labels": labels(owner, component),
    }
    if owner.uid is not None:
        meta["ownerReferences"] = [owner.reference()]
    return meta


def label_selector(owner: Owner, component: str) -> str:
    return ",".join(f"{k}={v}" for k, v in selector_labels(owner, component).items())


def config_hash(*parts: Any) -> str:
    """A stable digest of configuration; put in pod annotations so a change rolls the pods."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def redis_name(owner: Owner) -> str:
    return f"{owner.name}-redis"


def redis_claim_name(owner: Owner) -> str:
    """The Redis pod's volume claim, as the StatefulSet controller names it (template-set-0)."""
    return f"data-{redis_name(owner)}-0"


def redis_auth_secret_name(owner: Owner) -> str:
    return f"{owner.name}-redis-auth"


def cache_secret_name(owner: Owner) -> str:
    """The fleet's generated Secret: the key of the cache entries' MAC (``cache-secret``) and
    the token of the runtime's restricted admin APIs (``admin-token``). Another service shares
    this fleet's answers by naming it in ``spec.cache.secretRef`` (with the same
    ``spec.cache.namespace``)."""
    return f"{owner.name}-fleet"


def service_url(owner: Owner, *, https: bool = False) -> str:
    """The runtime Service's HTTP endpoint (``https`` for a fleet with a TLS Secret)."""
    return f"{'https' if https else 'http'}://{owner.name}.{owner.namespace}.svc:{RUNTIME_PORT}"


def managed_redis_url(owner: Owner) -> str:
    return f"redis://{redis_name(owner)}.{owner.namespace}.svc:{REDIS_PORT}/0"


def safe_to_evict_annotation(pod: Any) -> dict[str, str]:
    """The autoscaler annotation naming every emptyDir of ``pod``: scratch, copies and caches
    that a replacement pod rebuilds, so none of them should keep a node up."""
    local = [v["name"] for v in pod.get("volumes") or [] if "emptyDir" in v]
    return {SAFE_TO_EVICT_LOCAL_VOLUMES: ",".join(local)} if local else {}


def pull_secrets(spec: ServiceSpec) -> dict[str, Any]:
    """``imagePullSecrets`` for a pod spec of the service, or nothing when none are named."""
    secrets = [{"name": ref.name} for ref in spec.image_pull_secrets]
    return {"imagePullSecrets": secrets} if secrets else {}
