"""The runtime's TLS Secret as the pod template sees it: a digest of what the pods read from it.

The runtime reads its certificate and key once, when it starts. When cert-manager (or anyone)
renews the certificate it rewrites the Secret in place: the kubelet refreshes the mounted files,
but no running server reads them again. So the pods must restart to serve the new certificate,
and the operator makes that happen the way a configuration change does: a digest of the Secret's
content goes into the pod template's annotations, and a new digest rolls the pods (paced like
every other rollout). Only a digest is written, never the material.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cachefleet.operator.manifests.meta import config_hash

#: On the runtime's pod template: a digest of the TLS Secret's certificate, key and CA.
TLS_HASH_ANNOTATION = "cachefleet.io/tls-hash"
#: On the runtime Service of a TLS fleet (value "https"): the chart's ServiceMonitor scrapes the
#: Services carrying it over HTTPS, the others over HTTP.
SCHEME_LABEL = "cachefleet.io/scheme"
#: The keys of a kubernetes.io/tls Secret the runtime reads (``manifests.runtime.TLS_DIR``):
#: a change to any other key (a keystore cert-manager adds, say) changes nothing it serves.
SERVED_KEYS = ("tls.crt", "tls.key", "ca.crt")
CA_KEY = "ca.crt"


def tls_digest(secret: Mapping[str, Any] | None) -> str:
    """A digest of the keys the pods read from the TLS Secret ``secret`` (as the API returns
    it: ``data`` base64); "" when there is no Secret yet (the pods cannot start without it, so
    its arrival rolls nothing that runs)."""
    if secret is None:
        return ""
    data = secret.get("data") or {}
    plain = secret.get("stringData") or {}  # (only ever seen before the API server merges it)
    read = {key: data.get(key) or plain.get(key) for key in SERVED_KEYS}
    return config_hash("tls", {key: value for key, value in read.items() if value})
