"""Rules a real Kubernetes API server applies and the kmock emulator does not, as test helpers.

Each helper encodes one documented rule, with the page it comes from, so a test can check what
the operator renders or sends against the server's behaviour without a cluster:

- names and label values: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/
  and https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
- StatefulSet immutable fields: https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/
  (the API server answers 422 "updates to statefulset spec for fields other than 'replicas',
  'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and
  'minReadySeconds' are forbidden")
- the StatefulSet controller labels each pod ``controller-revision-hash: <set name>-<hash>``
  (the hash is up to 10 characters): same StatefulSet page, "Pod Identity"
- PVC expansion: https://kubernetes.io/docs/concepts/storage/persistent-volumes/#expanding-persistent-volumes-claims
  (only when the claim's StorageClass has ``allowVolumeExpansion: true``; never shrinking)
- PodDisruptionBudget: https://kubernetes.io/docs/tasks/run-application/configure-pdb/
  (an eviction is allowed while ``disruptionsAllowed`` > 0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
CONTROLLER_REVISION_HASH_LENGTH = 10
STATEFULSET_MUTABLE = frozenset(
    {
        "replicas",
        "ordinals",
        "template",
        "updateStrategy",
        "persistentVolumeClaimRetentionPolicy",
        "minReadySeconds",
    }
)


def dns_1035_label_ok(name: str) -> bool:
    """Service names (and every RFC 1035 label name): at most 63, starting with a letter."""
    return len(name) <= 63 and DNS_1035_LABEL.fullmatch(name) is not None


def dns_1123_subdomain_ok(name: str) -> bool:
    """Most object names (ConfigMap, Secret, Deployment, StatefulSet...): at most 253."""
    return len(name) <= 253 and DNS_1123_SUBDOMAIN.fullmatch(name) is not None


def label_value_ok(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.fullmatch(value) is not None


def statefulset_pod_labels(statefulset: Mapping[str, Any]) -> dict[str, str]:
    """The labels the StatefulSet controller gives its pods, with the longest revision hash."""
    name = statefulset["metadata"]["name"]
    labels = dict(statefulset["spec"]["template"]["metadata"]["labels"])
    labels["controller-revision-hash"] = f"{name}-{'x' * CONTROLLER_REVISION_HASH_LENGTH}"
    labels["statefulset.kubernetes.io/pod-name"] = f"{name}-0"
    return labels


def name_errors(obj: Mapping[str, Any]) -> list[str]:
    """Every name or label the API server would refuse for this object (and its pods)."""
    errors = []
    name = obj["metadata"]["name"]
    valid_name = dns_1035_label_ok if obj["kind"] == "Service" else dns_1123_subdomain_ok
    if not valid_name(name):
        errors.append(f"{obj['kind']} name {name!r}")
    labels = dict(obj["metadata"].get("labels") or {})
    if obj["kind"] == "StatefulSet":
        labels.update(statefulset_pod_labels(obj))
        if not DNS_1123_LABEL.fullmatch(f"{name}-0") or len(f"{name}-0") > 63:
            errors.append(f"pod hostname {name}-0")
    errors += [f"label {k}={v!r}" for k, v in labels.items() if not label_value_ok(str(v))]
    return errors


def statefulset_forbidden_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The spec fields an update of ``old`` to ``new`` would change that cannot be changed."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    fields = (set(old_spec) | set(new_spec)) - STATEFULSET_MUTABLE
    return sorted(f for f in fields if old_spec.get(f) != new_spec.get(f))


def claim_resize_refusal(
    old_size_bytes: int, new_size_bytes: int, *, class_allows_expansion: bool
) -> str | None:
    """Why the server refuses a claim's new storage request, or None when it accepts it."""
    if new_size_bytes < old_size_bytes:
        return "field can not be less than previous value"
    if new_size_bytes > old_size_bytes and not class_allows_expansion:
        return (
            "only dynamically provisioned pvc can be resized and the storageclass that "
            "provisions the pvc must support resize"
        )
    return None


def pdb_disruptions_allowed(pdb: Mapping[str, Any], *, expected: int, healthy: int) -> int:
    """``status.disruptionsAllowed`` the disruption controller computes for this budget."""
    spec = pdb["spec"]
    if "minAvailable" in spec:
        desired_healthy = int(spec["minAvailable"])
    else:
        desired_healthy = max(0, expected - int(spec["maxUnavailable"]))
    return max(0, healthy - desired_healthy)
