"""Chart values for running the operator for months: its runtime image, OpenShift, one writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from delivery.support import RELEASE, Helm, Manifest, only

OPERATOR = f"{RELEASE}-operator"


def render(helm: Helm, tmp_path: Path, values: dict[str, Any]) -> list[Manifest]:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return helm.template(path)


def operator_container(objects: list[Manifest]) -> dict[str, Any]:
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return dict(container)


def env_of(objects: list[Manifest]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in operator_container(objects).get("env") or []}


def test_the_runtime_image_follows_the_release_unless_a_mirror_is_named(
    helm: Helm, tmp_path: Path
) -> None:
    assert "CACHEFLEET_OPERATOR_RUNTIME_IMAGE" not in env_of(helm.template())
    mirrored = render(helm, tmp_path, {"runtimeImage": "mirror.example/cachefleet:0.1.0"})
    assert env_of(mirrored)["CACHEFLEET_OPERATOR_RUNTIME_IMAGE"] == (
        "mirror.example/cachefleet:0.1.0"
    )


def test_openshift_mode_leaves_ids_to_the_platform_for_the_operator_and_its_services(
    helm: Helm, tmp_path: Path
) -> None:
    default = only(helm.template(), "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert default["securityContext"]["runAsUser"] == 10001
    assert "CACHEFLEET_OPERATOR_USER_IDS" not in env_of(helm.template())
    objects = render(helm, tmp_path, {"openshift": {"enabled": True}})
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    security = pod["securityContext"]
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(security)
    assert security["runAsNonRoot"] is True
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    assert env_of(objects)["CACHEFLEET_OPERATOR_USER_IDS"] == "platform"


def test_one_replica_runs_standalone_and_several_elect_a_leader(helm: Helm, tmp_path: Path) -> None:
    default = helm.template()
    args = operator_container(default)["args"]
    assert "--standalone" in args  # never joins a kopf peering another operator installed
    assert not [a for a in args if a.startswith("--leader-election")]
    deployment = only(default, "Deployment", OPERATOR)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert not [o for o in default if o["kind"] == "Role"]

    objects = render(helm, tmp_path, {"replicas": 3})
    args = operator_container(objects)["args"]
    assert f"--leader-election={OPERATOR}" in args
    assert "--standalone" not in args  # (implied by --leader-election)
    assert only(objects, "Deployment", OPERATOR)["spec"]["replicas"] == 3
    # Written out, so the release owns it and an upgrade to one replica removes it (tested on a
    # real API server in tests/cluster/test_cluster_chart.py).
    assert only(objects, "Deployment", OPERATOR)["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}  # fmt: skip
    role = only(objects, "Role", f"{OPERATOR}-leader")
    assert role["metadata"]["namespace"] == "cachefleet-system"
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [OPERATOR], "verbs": ["get", "patch"]}]  # fmt: skip
    binding = only(objects, "RoleBinding", f"{OPERATOR}-leader")
    assert binding["roleRef"]["name"] == f"{OPERATOR}-leader"
    env = {e["name"]: e for e in operator_container(objects)["env"]}
    assert env["POD_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
