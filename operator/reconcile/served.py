"""What each ready runtime replica serves: the fingerprint of its model, asked from the pod.

Every runtime pod reports the fingerprint of the model files it loaded in its config response
(the ``cachefleet.fingerprint`` parameter). The operator asks each ready pod of a service and
writes the answers into the status, so a rollout is observable from the CachedInferenceService
itself: while it runs, two fingerprints stand side by side, each with the pods serving it.

A pod that does not answer (restarting, its network policy, a restricted config endpoint) is
listed without a fingerprint rather than dropped, so the status never hides a replica.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.reconcile.kube import Kube

#: The config parameter the runtime reports its model version's fingerprint in.
FINGERPRINT_PARAMETER = "cachefleet.fingerprint"
#: The runtime container and its HTTP port's name (``manifests.runtime``).
_CONTAINER = "server"
_PORT_NAME = "http"


def read_served(kube: Kube, owner: Owner, model: str, timeout_s: float) -> list[dict[str, str]]:
    """``[{"pod", "fingerprint"}]`` for each ready runtime pod of ``owner``, by pod name; the
    fingerprint is "" for a pod that did not answer. Blocking: call it off the event loop."""
    labels = meta.selector_labels(owner, "runtime")
    pods = kube.list_labelled("v1", "Pod", owner.namespace, labels)
    served = []
    for pod in sorted(pods, key=lambda p: str(p.get("metadata", {}).get("name"))):
        address = _address(pod)
        if address is None:
            continue
        served.append(
            {"pod": str(pod["metadata"]["name"]), "fingerprint": _ask(address, model, timeout_s)}
        )
    return served


def _address(pod: Mapping[str, Any]) -> str | None:
    """``host:port`` of a ready pod's HTTP endpoint; None when it is not ready."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    ip = status.get("podIP")
    if not ready or not ip:
        return None
    port = meta.RUNTIME_PORT
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == _CONTAINER:
            for item in container.get("ports") or []:
                if item.get("name") == _PORT_NAME:
                    port = int(item.get("containerPort", port))
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"{host}:{port}"


def _ask(address: str, model: str, timeout_s: float) -> str:
    url = f"http://{address}/v2/models/{urllib.parse.quote(model, safe='')}/config"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            document = json.load(response)
    except (OSError, ValueError, urllib.error.URLError):
        return ""
    parameter = (document.get("parameters") or {}).get(FINGERPRINT_PARAMETER) or {}
    return str(parameter.get("string_value") or "")
