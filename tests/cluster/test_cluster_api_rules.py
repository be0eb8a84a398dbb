"""The API-server rules the fast tests once wrote down by hand (``support/kube/api_rules.py``),
checked against the real server and its controllers: the StatefulSet and claim rules the helpers
still encode (with their messages), the controller-revision-hash label and its limit, Service
names, and a quota's refusal of a container that states no limit."""

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
    assert len(revision) - len("store-") <= 10  # what the operator's MAX_NAME_LENGTH allows for
    assert labels["statefulset.kubernetes.io/pod-name"] == "store-0"

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
    service = {"apiVersion": "v1", "kind": "Service",
               "metadata": {"name": name, "namespace": NAMESPACE},
               "spec": {"ports": [{"port": 80}]}}  # fmt: skip
    done = plane_ns.kubectl("apply", "-f", "-", stdin=json.dumps(service), check=False)
    assert done.returncode != 0
    assert "is invalid" in done.stderr


def test_a_statefulset_name_too_long_for_its_revision_label_gets_no_pod(plane_ns: Plane) -> None:
    """The StatefulSet controller labels each pod ``<set>-<revision hash>``; a name that makes
    the label longer than 63 characters is accepted, but no pod is ever made (the reason the
    operator caps its names at ``MAX_NAME_LENGTH``: ``<name>-redis`` must stay at 52)."""
    plane = plane_ns
    name = "s" * 53
    plane.apply([_statefulset(name)])

    def refused() -> str:
        events = plane.get("events", "-n", NAMESPACE, "--field-selector",
                           f"involvedObject.name={name},reason=FailedCreate")["items"]  # fmt: skip
        return "\n".join(event["message"] for event in events)

    message = until(refused, "the StatefulSet controller's FailedCreate")
    assert f'metadata.labels: Invalid value: "{name}-' in message
    assert "must be no more than 63 bytes" in message
    pod = plane.kubectl("get", "pod", f"{name}-0", "-n", NAMESPACE, check=False)
    assert pod.returncode != 0


def test_a_quota_refuses_a_container_that_states_no_limit(plane: Plane) -> None:
    """Under a ResourceQuota over limits, with no LimitRange to fill them in, every container
    (init containers too) must state each resource the quota counts."""
    namespace = "rules-quota"
    plane.kubectl("create", "namespace", namespace)
    quota = {"apiVersion": "v1", "kind": "ResourceQuota",
             "metadata": {"name": "q", "namespace": namespace},
             "spec": {"hard": {"limits.cpu": "4", "limits.memory": "4Gi"}}}  # fmt: skip
    plane.apply([quota])
    until(lambda: plane.get("resourcequota/q", "-n", namespace).get("status", {}).get("hard"),
          "the quota counted")  # fmt: skip
    stated = {"limits": {"cpu": "1", "memory": "1Gi"}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": namespace},
           "spec": {"initContainers": [{"name": "init", "image": "example.invalid/c"}],
                    "containers": [{"name": "c", "image": "example.invalid/c",
                                    "resources": stated}]}}  # fmt: skip
    account = ("get", "serviceaccount/default", "-n", namespace)
    until(lambda: plane.kubectl(*account, check=False).returncode == 0, "the ServiceAccount")
    done = plane.kubectl("apply", "-f", "-", stdin=json.dumps(pod), check=False)
    assert done.returncode != 0
    assert "must specify limits.cpu for: init; limits.memory for: init" in done.stderr
