"""Pod and container security settings every child pod uses: non-root, nothing to escalate."""

from __future__ import annotations

from typing import Any


def pod_security(user_id: int) -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": user_id,
        "runAsGroup": user_id,
        "fsGroup": user_id,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
