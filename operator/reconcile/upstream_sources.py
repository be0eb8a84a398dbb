"""The upstream's Secret and ConfigMap (``spec.server``), read for the digest that rolls the pods.

The runtime reads the auth value and the CA once, at start, so a rotated token or a renewed CA
must restart the pods (``manifests.upstream``). Both are read by name, in the service's own
namespace, on every reconcile and resync (one GET each), as the runtime's TLS Secret is
(``tls_secret``): the operator neither lists nor watches Secrets (its RBAC grants ``get`` only;
see ``manifests.children.LISTED_KINDS``), so a rotation reaches the pods within one resync
interval plus the rollout. Only a digest leaves this module, never the value.
"""

from __future__ import annotations

from cachefleet.operator.manifests.spec import ServiceSpec
from cachefleet.operator.manifests.upstream import upstream_digest
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.passwords import read_secret_key


def read_upstream_digest(kube: Kube, namespace: str, spec: ServiceSpec) -> str:
    """The digest of the auth value and CA the spec's server names, as they are now ("" for
    what is missing, or without a server)."""
    server = spec.server
    if server is None:
        return ""
    auth = None
    if server.auth_secret_ref is not None:
        ref = server.auth_secret_ref
        auth = read_secret_key(kube, namespace, ref.name, ref.key)
    ca = None
    if server.tls is not None:
        ref_ca = server.tls.ca_config_map_ref
        configmap = kube.get("v1", "ConfigMap", namespace, ref_ca.name)
        if configmap is not None:
            ca = (configmap.get("data") or {}).get(ref_ca.key)
    return upstream_digest(server, auth_value=auth, ca_pem=ca)
