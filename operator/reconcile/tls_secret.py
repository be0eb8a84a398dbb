"""The runtime's TLS Secret, read for the digest that rolls the pods and the CA that checks them.

Read on every reconcile and resync (one GET per TLS service): cert-manager rewrites the Secret
in place, and the next resync turns the new content into a new pod template digest
(``manifests.tls``). The operator does not watch Secrets: that would keep every Secret of the
watched namespaces in its memory to notice a renewal weeks ahead of the old certificate's end.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from cachefleet.operator.manifests.spec import ServiceSpec
from cachefleet.operator.manifests.tls import CA_KEY
from cachefleet.operator.reconcile.kube import Kube


def read_tls_secret(kube: Kube, namespace: str, spec: ServiceSpec) -> dict[str, Any] | None:
    """The TLS Secret the spec names; None without TLS or while the Secret is missing."""
    tls = spec.runtime.tls
    if tls is None:
        return None
    return kube.get("v1", "Secret", namespace, tls.secret_name)


def secret_ca(secret: dict[str, Any] | None) -> str | None:
    """The PEM of the Secret's ``ca.crt``; None when it has none (or it is unreadable)."""
    if secret is None:
        return None
    encoded = (secret.get("data") or {}).get(CA_KEY)
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
