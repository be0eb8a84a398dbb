"""Rendered children against the schemas a real cluster holds: Kubernetes' own for built-in
kinds (kubernetes-validate), KEDA's for a ScaledObject (``support.kube.keda``)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate

from support.kube.keda import validate_scaled_object

KUBERNETES_VERSION = "1.32"


def validate_child(obj: dict[str, Any]) -> None:
    """Raise when the cluster would refuse ``obj`` (unknown fields included)."""
    if obj["apiVersion"].startswith("keda.sh/"):
        validate_scaled_object(obj)
        return
    kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
