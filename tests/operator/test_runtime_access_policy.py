"""The NetworkPolicy that lets the operator ask the runtime pods what they serve, in namespaces
that deny ingress by default: opt-in (the operator's setting, the chart's value), checked
against the real Kubernetes schema, and matching the pods it must select and admit as the
operator's own builders and the real chart render them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from delivery.support import CHART, NAMESPACE, RELEASE, Helm, load_all, only, require_tool
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, must, service
from support.kube.validation import validate_child

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

MODEL = {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}


def children(**options: Any) -> list[dict[str, Any]]:
    spec = parse_spec({"model": MODEL, "cache": {"mode": "local"}})
    return build_children(spec, owner=Owner("svc", "team-a", "uid"), **options)


def chart(*settings: str) -> list[dict[str, Any]]:
    helm = Helm(require_tool("helm", "run scripts/get-helm"))
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    result = helm.run(*args, *(f"--set={setting}" for setting in settings))
    assert result.returncode == 0, result.stderr
    return load_all(result.stdout)


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) == {"matchLabels"}
    return bool(selector["matchLabels"].items() <= labels.items())


def test_the_policy_admits_the_charts_operator_pods_to_the_runtimes_http_port() -> None:
    assert not [c for c in children() if c["kind"] == "NetworkPolicy"]  # off unless asked
    rendered = children(runtime_access=True, operator_namespace=NAMESPACE)
    [policy] = [c for c in rendered if c["kind"] == "NetworkPolicy"]
    validate_child(policy)
    assert policy["metadata"]["name"] == "svc-operator-access"

    [deployment] = [c for c in rendered if c["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]
    assert matches(policy["spec"]["podSelector"], pod["metadata"]["labels"])
    [rule] = policy["spec"]["ingress"]
    [port] = rule["ports"]
    [server] = pod["spec"]["containers"]
    assert port["port"] in [p["name"] for p in server["ports"]]  # a named port the pod has
    assert port["protocol"] == "TCP"

    objects = chart("runtimeNetworkPolicy=true")
    operator = only(objects, "Deployment", f"{RELEASE}-operator")["spec"]["template"]
    [peer] = rule["from"]
    assert matches(peer["podSelector"], operator["metadata"]["labels"])
    namespace_labels = {"kubernetes.io/metadata.name": NAMESPACE}  # the API server sets it
    assert matches(peer["namespaceSelector"], namespace_labels)
    env = operator["spec"]["containers"][0]["env"]
    assert {"name": "CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY", "value": "true"} in env
    default = only(chart(), "Deployment", f"{RELEASE}-operator")["spec"]["template"]
    names = [v["name"] for v in default["spec"]["containers"][0]["env"]]
    assert "CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY" not in names


async def test_the_operator_applies_it_only_with_the_setting_on(cluster: Cluster, api: Api) -> None:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    path = f"/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/svc-operator-access"
    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    for value, applied in (("false", 0), ("true", 1)):
        environ = {"CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY": value}
        passes = Periodic(Reconciler(Kube(), OperatorSettings.from_environ(environ)), KeyedLocks())
        await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
        sent = [r for r in cluster["patch"] if r.url.path == path and "fieldManager" in r.params]
        assert len(sent) == applied
    validate_child(dict(sent[-1].data))
