"""Rules a real Kubernetes API server applies and the kmock emulator does not, as test helpers,
for the fast tests that need the server's answer to a case the real control plane's tests
(``tests/cluster/``) cannot make, or make only slowly.

- StatefulSet immutable fields (the API server answers 422 "updates to statefulset spec for
  fields other than 'replicas', 'ordinals', 'template', 'updateStrategy',
  'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are
  forbidden"), and PVC expansion only where the claim's StorageClass has
  ``allowVolumeExpansion: true``, never shrinking: rules and messages checked on a real
  kube-apiserver (``tests/cluster/test_cluster_api_rules.py``); the emulator of
  ``tests/operator/test_reconcile_requests.py`` refuses with them where it adds a second cause
  to one refusal, which no CR can make a real server do.
- OpenShift's restricted-v2 SCC: OpenShift's admission, not kube-apiserver's, so no server here
  can produce it.

Names and label values, the controller-revision-hash label, the disruption budget, quotas and
the Pod Security "restricted" standard were once written here too; the real server's answers
replaced them (``test_cluster_api_rules.py``, ``test_cluster_platform.py``,
``test_cluster_examples.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]


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
