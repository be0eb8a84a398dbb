"""Where the operator's own pods may reach a service's pods, as NetworkPolicy peers and rules.

The managed Redis's NetworkPolicy admits the operator (``manifests.redis``); the runtime's HTTP
port admits it only where the operator is told to render :func:`build_runtime_access_policy`:
the served pass asks each ready runtime pod what it serves, and a namespace that denies ingress
by default keeps it out otherwise.

That policy is opt-in (the operator's ``CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY``, the
chart's ``runtimeNetworkPolicy``) because any policy that selects a pod isolates it: in a
namespace without a default-deny policy, a policy admitting only the operator would cut the
runtime off from its clients. Where namespaces deny by default it only adds the operator.
"""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.meta import Owner

COMPONENT = "runtime"


def operator_peer(operator_namespace: str) -> dict[str, Any]:
    """The operator's pods (the chart's labels) in the namespace it runs in."""
    return {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": meta.APP_NAME,
                "app.kubernetes.io/component": "operator",
            }
        },
    }


def runtime_access_name(owner: Owner) -> str:
    return f"{owner.name}-operator-access"


def build_runtime_access_policy(owner: Owner, *, operator_namespace: str) -> dict[str, Any]:
    """The operator's pods may open the runtime pods' HTTP port (named: wherever it is)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta.metadata(owner, runtime_access_name(owner), COMPONENT),
        "spec": {
            "podSelector": {"matchLabels": meta.selector_labels(owner, COMPONENT)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [operator_peer(operator_namespace)],
                    "ports": [{"protocol": "TCP", "port": "http"}],
                }
            ],
        },
    }
