"""Pods a platform team's cluster accepts and can scale down: the cluster autoscaler's local
volume rule, private registries, quotas without a LimitRange, size limits, placement and
metadata. Checked on the rendered objects against Kubernetes' schemas; the server's own quota
and Pod Security admission of these pods are seen on the real control plane
(``tests/cluster/test_cluster_platform.py``, ``test_cluster_examples.py``).
"""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from support.kube.crd_schema import cel_failures

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import SAFE_TO_EVICT_LOCAL_VOLUMES, Owner
from cachefleet.operator.manifests.spec import parse_spec

KUBERNETES_VERSION = "1.32"
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
IMAGE_MODELS: dict[str, Any] = {
    "name": "m",
    "repository": {"image": {"image": "registry.example.com/m:1"}},
}
BASE: dict[str, Any] = {"replicas": 2, "model": IMAGE_MODELS}
VARIANTS: dict[str, dict[str, Any]] = {
    "image-models": {},
    "pvc-models": {"model": {"name": "m", "repository": {"pvc": {"claimName": "models"}}}},
    "persistent-redis": {
        "cache": {"redis": {"persistence": {"mode": "aof", "size": "1Gi"}}},
    },
    "local-only": {"cache": {"mode": "local"}},
}


def render(extra: dict[str, Any]) -> list[dict[str, Any]]:
    spec = parse_spec({**copy.deepcopy(BASE), **copy.deepcopy(extra)})
    return build_children(spec, owner=OWNER, redis_password="pw", cache_secret="mac")


def templates(children: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The pod templates of the workloads, by kind."""
    return {
        c["kind"]: c["spec"]["template"]
        for c in children
        if c["kind"] in ("Deployment", "StatefulSet")
    }


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_local_volume_is_named_safe_to_evict_for_the_cluster_autoscaler(
    variant: str,
) -> None:
    for kind, template in templates(render(VARIANTS[variant])).items():
        local = {v["name"] for v in template["spec"]["volumes"] if "emptyDir" in v}
        assert local, kind
        named = template["metadata"]["annotations"][SAFE_TO_EVICT_LOCAL_VOLUMES]
        # The autoscaler keeps the node unless every local volume of the pod is listed.
        assert set(named.split(",")) == local, kind


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_emptydir_has_a_size_limit(variant: str) -> None:
    for kind, template in templates(render(VARIANTS[variant])).items():
        for volume in template["spec"]["volumes"]:
            if "emptyDir" in volume and not (kind == "StatefulSet" and volume["name"] == "data"):
                assert volume["emptyDir"].get("sizeLimit"), (kind, volume["name"])


def test_the_model_volume_is_bounded_by_the_models_size_limit() -> None:
    model = copy.deepcopy(IMAGE_MODELS)
    model["repository"]["image"]["sizeLimit"] = "3Gi"
    pod = templates(render({"model": model}))["Deployment"]["spec"]
    assert {"name": "models", "emptyDir": {"sizeLimit": "3Gi"}} in pod["volumes"]


def test_pull_secrets_reach_every_pod_of_the_service() -> None:
    secrets = [{"name": "registry"}, {"name": "mirror"}]
    children = render({"imagePullSecrets": secrets})
    found = templates(children)
    assert set(found) == {"Deployment", "StatefulSet"}
    for template in found.values():
        assert template["spec"]["imagePullSecrets"] == secrets
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    without = templates(render({}))
    assert all("imagePullSecrets" not in t["spec"] for t in without.values())


def test_service_account_spread_and_pod_metadata_reach_the_runtime_pods() -> None:
    selector = {"matchLabels": {"app.kubernetes.io/instance": "svc"}}
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
               "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": selector}]  # fmt: skip
    runtime = {
        "serviceAccountName": "inference",
        "topologySpreadConstraints": spread,
        "podAnnotations": {"sidecar.istio.io/inject": "false"},
        "podLabels": {"team": "vision"},
    }
    children = render({"runtime": runtime})
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)
    template = deployment["spec"]["template"]
    assert template["spec"]["serviceAccountName"] == "inference"
    assert template["spec"]["automountServiceAccountToken"] is False
    assert template["spec"]["topologySpreadConstraints"] == spread
    assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"
    assert template["metadata"]["labels"]["team"] == "vision"
    # The selector (immutable) does not move, and still selects the pods.
    selector = deployment["spec"]["selector"]["matchLabels"]
    [plain] = [c for c in render({}) if c["kind"] == "Deployment"]
    assert selector == plain["spec"]["selector"]["matchLabels"]
    assert selector.items() <= template["metadata"]["labels"].items()


@pytest.mark.parametrize(
    ("runtime", "message"),
    [
        ({"podLabels": {"app.kubernetes.io/instance": "x"}}, "must not set"),
        ({"podAnnotations": {"cachefleet.io/config-hash": "x"}}, "must not set"),
    ],
)
def test_pod_metadata_may_not_take_the_operators_own_keys(
    runtime: dict[str, Any], message: str
) -> None:
    spec = {**copy.deepcopy(BASE), "runtime": runtime}
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)
    body = {"metadata": {"name": "svc"}, "spec": spec}
    assert any(message in failure for failure in cel_failures(body))


def test_the_model_copy_asks_for_what_the_server_asks_for_and_its_disk() -> None:
    """The copy asks for no more CPU and memory than the server, so the pod's effective request
    of those is the same; it adds the node disk the model volume may take (its sizeLimit). (That
    every container then passes a quota over requests and limits is seen on the real server:
    tests/cluster/test_cluster_platform.py.)"""
    resources = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}}
    pod = templates(render({"runtime": {"resources": resources, "gpus": 1}}))["Deployment"]
    [copy_models] = pod["spec"]["initContainers"]
    assert copy_models["resources"] == {  # (without the server's GPU)
        "requests": {**resources["requests"], "ephemeral-storage": "10Gi"},
        "limits": resources["limits"],
    }


def test_without_server_resources_the_model_copy_still_has_its_own() -> None:
    pod = templates(render({}))["Deployment"]["spec"]
    [copy_models] = pod["initContainers"]
    assert not pod["containers"][0].get("resources")  # the server's: none stated
    assert set(copy_models["resources"]["requests"]) >= {"cpu", "memory"}
    assert set(copy_models["resources"]["limits"]) == {"cpu", "memory"}
