"""TLS fleets are scraped over HTTPS: the chart's ServiceMonitor (rendered by the real helm)
keeps each runtime Service on the endpoint of its scheme, by the label the operator puts on the
Service of a TLS fleet.

No OpenAPI schema ships for the ServiceMonitor kind; its fields are checked against the
Prometheus Operator's documented ones (``Endpoint``, ``RelabelConfig``, ``SafeTLSConfig``).
"""

from __future__ import annotations

import re
from typing import Any

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from delivery.support import CHART, NAMESPACE, RELEASE, Helm, Manifest, load_all, only

#: The fields of the Prometheus Operator's SafeTLSConfig.
SAFE_TLS_FIELDS = {"ca", "cert", "keySecret", "serverName", "insecureSkipVerify",
                   "minVersion", "maxVersion"}  # fmt: skip
#: Prometheus's label name rule, which a relabeling's source labels follow.
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
MODEL = {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}


def runtime_service_labels(runtime: dict[str, Any]) -> dict[str, str]:
    """The labels of the runtime Service the operator renders for this ``spec.runtime``."""
    spec = parse_spec({"model": MODEL, "cache": {"mode": "local"}, "runtime": runtime})
    children = build_children(spec, owner=Owner("svc", "team-a", "uid"))
    [found] = [c for c in children if c["kind"] == "Service"]
    return dict(found["metadata"]["labels"])


def service_discovery_labels(labels: dict[str, str]) -> dict[str, str]:
    """A Service's labels as Prometheus's Kubernetes discovery names them."""
    return {
        "__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key): value
        for key, value in labels.items()
    }


def kept(endpoint: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether the endpoint's keep/drop relabelings keep a target of a Service so labelled."""
    found = service_discovery_labels(labels)
    for rule in endpoint.get("relabelings") or []:
        assert all(LABEL_NAME.match(name) for name in rule["sourceLabels"])
        value = rule.get("separator", ";").join(found.get(n, "") for n in rule["sourceLabels"])
        matched = re.fullmatch(rule.get("regex", "(.*)"), value) is not None
        if rule["action"] == "keep" and not matched:
            return False
        if rule["action"] == "drop" and matched:
            return False
    return True


def test_each_runtime_service_is_scraped_once_over_its_own_scheme(
    helm: Helm, custom_objects: list[Manifest]
) -> None:
    monitor = only(custom_objects, "ServiceMonitor", "cachefleet-runtime")
    endpoints = [e for e in monitor["spec"]["endpoints"] if e["port"] == "http"]
    by_scheme = {endpoint["scheme"]: endpoint for endpoint in endpoints}
    assert set(by_scheme) == {"http", "https"}
    assert by_scheme["https"]["tlsConfig"] == {"insecureSkipVerify": True}
    assert set(by_scheme["https"]["tlsConfig"]) <= SAFE_TLS_FIELDS
    assert "tlsConfig" not in by_scheme["http"]

    plain = runtime_service_labels({})
    tls = runtime_service_labels({"tls": {"secretName": "svc-tls"}})
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= plain.items()
    assert selector.items() <= tls.items()
    assert [s for s, e in by_scheme.items() if kept(e, plain)] == ["http"]
    assert [s for s, e in by_scheme.items() if kept(e, tls)] == ["https"]


def test_a_checked_tls_config_is_passed_through(helm: Helm) -> None:
    settings = [
        "serviceMonitor.enabled=true",
        "serviceMonitor.tlsConfig.insecureSkipVerify=false",
        "serviceMonitor.tlsConfig.serverName=metrics.cachefleet",
        "serviceMonitor.tlsConfig.ca.secret.name=fleet-ca",
        "serviceMonitor.tlsConfig.ca.secret.key=ca.crt",
    ]
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    result = helm.run(*args, *(f"--set={setting}" for setting in settings))
    assert result.returncode == 0, result.stderr
    objects = load_all(result.stdout)
    monitor = only(objects, "ServiceMonitor", "cachefleet-runtime")
    [https] = [e for e in monitor["spec"]["endpoints"] if e["scheme"] == "https"]
    assert https["tlsConfig"] == {
        "insecureSkipVerify": False,
        "serverName": "metrics.cachefleet",
        "ca": {"secret": {"name": "fleet-ca", "key": "ca.crt"}},
    }
