"""Which of a fleet's runtime ConfigMaps its pods may still read.

Runtime ConfigMaps are immutable and named by their content, so a change makes a new one and the
old one stays in use by the pods of the previous ReplicaSet until the rollout has replaced them
(and by the live pod template itself while a rollout is queued). Pruning deletes an old one only
when neither the Deployment's template nor any ReplicaSet that still has pods names it: a pod
that restarts mid-rollout then always finds the settings it was started with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.runtime import COMPONENT, is_runtime_configmap
from cachefleet.operator.reconcile.kube import Kube


def mounted_configmaps(workload: Mapping[str, Any] | None) -> set[str]:
    """The ConfigMaps a Deployment's or ReplicaSet's pod template mounts."""
    template = ((workload or {}).get("spec") or {}).get("template") or {}
    volumes = (template.get("spec") or {}).get("volumes") or []
    return {v["configMap"]["name"] for v in volumes if (v.get("configMap") or {}).get("name")}


def _has_pods(replicaset: Mapping[str, Any]) -> bool:
    spec, status = replicaset.get("spec") or {}, replicaset.get("status") or {}
    return int(spec.get("replicas") or 0) > 0 or int(status.get("replicas") or 0) > 0


class NeededConfigs:
    """A pruning filter: True for a runtime ConfigMap the fleet's pods may still read.

    The ReplicaSets are listed on the first question only, so a reconcile with nothing to prune
    costs no request.
    """

    def __init__(self, kube: Kube, owner: Owner, deployment: Mapping[str, Any] | None) -> None:
        self._kube = kube
        self._owner = owner
        self._deployment = deployment
        self._needed: set[str] | None = None

    def __call__(self, obj: Mapping[str, Any]) -> bool:
        name = str((obj.get("metadata") or {}).get("name"))
        if obj.get("kind") != "ConfigMap" or not is_runtime_configmap(self._owner, name):
            return False
        if self._needed is None:
            self._needed = mounted_configmaps(self._deployment)
            for replicaset in self._replicasets():
                if _has_pods(replicaset):
                    self._needed |= mounted_configmaps(replicaset)
        return name in self._needed

    def _replicasets(self) -> Iterable[Mapping[str, Any]]:
        labels = meta.selector_labels(self._owner, COMPONENT)
        return self._kube.list_labelled("apps/v1", "ReplicaSet", self._owner.namespace, labels)
