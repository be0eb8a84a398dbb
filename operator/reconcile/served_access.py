"""How the operator asks one service's pods what they serve: its TLS and its restrictions.

The pods serve HTTPS when the service has a TLS Secret; its ``ca.crt``, when it has one, checks
their certificate. When the service restricts the model-config API, the config request carries
the fleet's admin token, which the operator generated and keeps in the fleet's Secret (it is
the same token the fleet's own admin clients use; it only ever goes to that fleet's pods).
"""

from __future__ import annotations

from cachefleet.operator.manifests.meta import Owner, cache_secret_name
from cachefleet.operator.manifests.runtime import ADMIN_HEADER, ADMIN_TOKEN_KEY
from cachefleet.operator.manifests.spec import ServiceSpec
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.passwords import read_secret_key
from cachefleet.operator.reconcile.served import Access
from cachefleet.operator.reconcile.tls_secret import read_tls_secret, secret_ca

#: The runtime's API group of ``GET /v2/models/{m}/config`` (Triton's name).
CONFIG_GROUP = "model-config"


def served_access(kube: Kube, owner: Owner, spec: ServiceSpec) -> Access:
    """The scheme, CA and headers to ask ``spec``'s pods with (a Secret read for each)."""
    https = spec.runtime.tls is not None
    ca = secret_ca(read_tls_secret(kube, owner.namespace, spec)) if https else None
    headers: dict[str, str] = {}
    if CONFIG_GROUP in spec.runtime.restricted_apis:
        token = read_secret_key(kube, owner.namespace, cache_secret_name(owner), ADMIN_TOKEN_KEY)
        if token:
            headers[ADMIN_HEADER] = token
    return Access(https=https, ca_pem=ca, headers=headers)
