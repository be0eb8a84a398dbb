"""The API-server rules the emulator's tests assume (``tests/support/kube/api_rules.py``),
checked against the real server: each helper's rule and message as kube-apiserver 1.35 and its
controllers apply them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.kube import api_rules
from support.plane import Plane, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "rules"


@pytest.fixture(scope="module")
def plane_ns(plane: Plane) -> Plane:
    """The module's namespace (deleted at its end: ``nothing_left_behind``)."""
    plane.kubectl("create", "namespace", NAMESPACE)
    return plane


def _statefulset(name: str, size: str = "1Gi") -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "serviceName": name,
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                         "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}}],
        },
    }  # fmt: skip


def _patch(plane: Plane, resource: str, patch: dict[str, Any]) -> str:
    done = plane.kubectl("patch", resource, "-n", NAMESPACE, "--type=merge", "-p",
                         json.dumps(patch), check=False)  # fmt: skip
    assert done.returncode != 0, f"{resource} accepted {patch}"
    return done.stderr


def test_statefulset_rules(plane_ns: Plane) -> None:
    plane = plane_ns
    plane.apply([_statefulset("store")])
    # The StatefulSet controller names its pod's revision "<set>-<hash of at most 10>".
    pod = until(lambda: plane.kubectl("get", "pod", "store-0", "-n", NAMESPACE, "-o", "json",
                                      check=False).stdout, "the StatefulSet's pod")  # fmt: skip
    labels = json.loads(pod)["metadata"]["labels"]
    revision = labels["controller-revision-hash"]
    assert revision.startswith("store-")
    assert len(revision) - len("store-") <= api_rules.CONTROLLER_REVISION_HASH_LENGTH
    assert labels["statefulset.kubernetes.io/pod-name"] == "store-0"
    assert set(labels) >= set(api_rules.statefulset_pod_labels(_statefulset("store")))

    # Changing a claim template is refused with the helper's message.
    changed = _statefulset("store", size="2Gi")["spec"]
    refused = _patch(plane, "statefulset/store", {"spec": {
        "volumeClaimTemplates": changed["volumeClaimTemplates"]}})  # fmt: skip
    assert api_rules.STATEFULSET_FORBIDDEN_MESSAGE in refused
    assert api_rules.statefulset_forbidden_changes(_statefulset("store"), _statefulset(
        "store", size="2Gi")) == ["volumeClaimTemplates"]  # fmt: skip
    # ... and the fields the helper calls mutable are accepted.
    plane.kubectl("patch", "statefulset/store", "-n", NAMESPACE, "--type=merge", "-p",
                  json.dumps({"spec": {"minReadySeconds": 3, "replicas": 2}}))  # fmt: skip


def test_claim_resize_rules(plane_ns: Plane) -> None:
    plane = plane_ns
    claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
             "metadata": {"name": "sized", "namespace": NAMESPACE},
             "spec": {"accessModes": ["ReadWriteOnce"],
                      "resources": {"requests": {"storage": "5Gi"}}}}  # fmt: skip
    plane.apply([claim])
    until(lambda: plane.get("pvc/sized", "-n", NAMESPACE)["status"].get("phase") == "Bound",
          "the claim bound to a static volume")  # fmt: skip
    grow = {"spec": {"resources": {"requests": {"storage": "6Gi"}}}}
    expected = api_rules.claim_resize_refusal(5, 6, class_allows_expansion=False)
    assert expected is not None
    assert expected in _patch(plane, "pvc/sized", grow)
    shrink = {"spec": {"resources": {"requests": {"storage": "4Gi"}}}}
    expected = api_rules.claim_resize_refusal(5, 4, class_allows_expansion=False)
    assert expected is not None
    assert expected in _patch(plane, "pvc/sized", shrink)


@pytest.mark.parametrize("name", ["1-starts-with-a-digit", "has.a.dot", "x" * 64])
def test_service_names_are_dns_1035_labels(plane_ns: Plane, name: str) -> None:
    assert not api_rules.dns_1035_label_ok(name)
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"ports": [{"port": 80}]}}  # fmt: skip
    done = plane_ns.kubectl("apply", "-f", "-", stdin=json.dumps(service), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr
