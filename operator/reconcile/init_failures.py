"""RuntimeReady from a runtime pod whose model download failed.

The Deployment never tells of it: its pods exist, only they stay in ``Init`` while the kubelet
restarts the ``fetch-model`` init container with a growing back-off. The pods' own status does,
in ``initContainerStatuses``: the container terminated with a non-zero exit code (now, or last
time while it waits in ``CrashLoopBackOff``), and its termination message is the download's
one-line reason (the URI and why). That message becomes RuntimeReady's, with reason
``ModelDownloadFailed``, which Ready passes on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cachefleet.operator.manifests.model_fetch import CONTAINER
from cachefleet.operator.reconcile.conditions import Condition

MODEL_DOWNLOAD_FAILED = "ModelDownloadFailed"
#: Kubernetes keeps at most this much of a termination message; a status message need not more.
MESSAGE_LIMIT = 1024


def download_failure(pods: Iterable[Mapping[str, Any]]) -> Condition | None:
    """RuntimeReady=False for the first pod (by name) whose download failed; None if none did."""
    for pod in sorted(pods, key=lambda p: str((p.get("metadata") or {}).get("name"))):
        message = _failed_fetch(pod)
        if message is not None:
            name = (pod.get("metadata") or {}).get("name")
            text = f"the model download failed in pod {name}: {message}"
            return Condition("RuntimeReady", False, MODEL_DOWNLOAD_FAILED, text)
    return None


def _failed_fetch(pod: Mapping[str, Any]) -> str | None:
    """The failed fetch-model container's message, or None while it runs or after it succeeded."""
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") != CONTAINER:
            continue
        state = status.get("state") or {}
        terminated = state.get("terminated")
        if terminated is None and "waiting" in state:
            terminated = (status.get("lastState") or {}).get("terminated")
        if terminated is None or int(terminated.get("exitCode") or 0) == 0:
            return None
        message = str(terminated.get("message") or "").strip()
        reason = terminated.get("reason") or "Error"
        return (message or f"{reason}, exit code {terminated['exitCode']}")[:MESSAGE_LIMIT]
    return None
