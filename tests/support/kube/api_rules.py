"""Rules a real Kubernetes API server applies and the kmock emulator does not, as test helpers.

Each helper encodes one documented rule, with the page it comes from, so a test can check what
the operator renders or sends against the server's behaviour without a cluster:

- names and label values: https://kubernetes.io/docs/concepts/overview/working-with-objects/names/
  and https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#syntax-and-character-set
- StatefulSet immutable fields: https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/
  (the API server answers 422 "updates to statefulset spec for fields other than 'replicas',
  'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit',
  'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"; these rules and
  messages are checked on a real kube-apiserver: tests/cluster/test_cluster_api_rules.py)
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
        "revisionHistoryLimit",
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


STATEFULSET_FORBIDDEN_MESSAGE = (
    "Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', "
    "'template', 'updateStrategy', 'revisionHistoryLimit', "
    "'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden"
)


def statefulset_forbidden_cause() -> dict[str, str]:
    """The ``details.causes`` entry of the server's 422 for an immutable field's update."""
    return {"reason": "FieldValueForbidden", "message": STATEFULSET_FORBIDDEN_MESSAGE,
            "field": "spec"}  # fmt: skip


def claim_resize_refusal(
    old_size_bytes: int, new_size_bytes: int, *, class_allows_expansion: bool
) -> str | None:
    """Why the server refuses a claim's new storage request, or None when it accepts it."""
    if new_size_bytes < old_size_bytes:
        return "field can not be less than status.capacity"  # a bound claim, as kube 1.35 says
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


# --- admission of pods: ResourceQuota, Pod Security "restricted", OpenShift's restricted-v2 ------

#: Volume types the "restricted" Pod Security Standard allows
#: (https://kubernetes.io/docs/concepts/security/pod-security-standards/#restricted).
RESTRICTED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
     "projected", "secret"}
)  # fmt: skip


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


def quota_refusals(pod: Mapping[str, Any], quota: list[str]) -> list[str]:
    """Containers a ResourceQuota over ``quota`` (e.g. ``limits.memory``) refuses, with no
    LimitRange to fill them in: every container, init containers included, must state each
    resource the quota tracks (https://kubernetes.io/docs/concepts/policy/resource-quotas/;
    a request defaults to the limit when only the limit is set)."""
    refused = []
    for container in _containers(pod):
        resources = container.get("resources") or {}
        for tracked in quota:
            section, resource = tracked.split(".", 1)
            stated = resource in (resources.get(section) or {})
            if section == "requests":
                stated = stated or resource in (resources.get("limits") or {})
            if not stated:
                refused.append(f"{container['name']}: no {tracked}")
    return refused


def restricted_violations(pod: Mapping[str, Any]) -> list[str]:
    """What the Pod Security Standard "restricted" (with "baseline") refuses in ``pod``."""
    found = []
    security = pod.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(flag):
            found.append(f"{flag} is set")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            found.append(f"volume {volume['name']} is of type {sorted(kinds)}")
    if security.get("runAsUser") == 0:
        found.append("the pod runs as user 0")
    for container in _containers(pod):
        name = container["name"]
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{name} is privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name} does not set allowPrivilegeEscalation: false")
        if not context.get("runAsNonRoot", security.get("runAsNonRoot")):
            found.append(f"{name} does not set runAsNonRoot: true")
        if context.get("runAsUser") == 0:
            found.append(f"{name} runs as user 0")
        seccomp = (context.get("seccompProfile") or security.get("seccompProfile") or {}).get(
            "type"
        )
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name} has seccomp profile {seccomp}")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{name} does not drop ALL capabilities")
        if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
            found.append(f"{name} adds capabilities")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                found.append(f"{name} uses a host port")
    return found


def scc_restricted_v2_refusals(pod: Mapping[str, Any], uid_range: range) -> list[str]:
    """What OpenShift's restricted-v2 SCC refuses: user ids and fsGroup must fall in the
    namespace's range (annotation openshift.io/sa.scc.uid-range, e.g. 1000680000/10000), which
    no manifest can know in advance; left unset, the platform assigns them
    (https://docs.openshift.com/container-platform/4.16/authentication/managing-security-context-constraints.html)."""
    found = []
    security = pod.get("securityContext") or {}
    for field in ("runAsUser", "runAsGroup", "fsGroup"):
        value = security.get(field)
        if value is not None and value not in uid_range:
            found.append(f"pod {field} {value} is outside {uid_range.start}-{uid_range.stop - 1}")
    for container in _containers(pod):
        context = container.get("securityContext") or {}
        for field in ("runAsUser", "runAsGroup"):
            value = context.get(field)
            if value is not None and value not in uid_range:
                found.append(f"{container['name']} {field} {value} is outside the range")
    return found
