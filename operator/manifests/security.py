"""Pod and container security settings every child pod uses: non-root, nothing to escalate."""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests.spec import UserIds


def pod_security(user_id: int, *, user_ids: UserIds = "fixed") -> dict[str, Any]:
    """Non-root with the default seccomp profile; with ``user_ids="platform"`` the user, group
    and fsGroup are left out for the platform to assign.

    OpenShift's restricted-v2 SCC admits only ids from the namespace's own range (for example
    1000680000/10000), which no manifest can know beforehand: it refuses the images' fixed ids
    and fills in its own when none are given. Both forms meet the Pod Security "restricted"
    standard.
    """
    ids = {"runAsUser": user_id, "runAsGroup": user_id, "fsGroup": user_id}
    return {
        "runAsNonRoot": True,
        **(ids if user_ids == "fixed" else {}),
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
