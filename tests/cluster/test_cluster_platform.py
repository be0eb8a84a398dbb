"""A fleet at the limits a platform team sets, on the real control plane: the longest name the
operator accepts, in a namespace that enforces the Pod Security "restricted" standard and a
ResourceQuota over CPU and memory requests and limits (with no LimitRange to fill them in),
with ids left to the platform (``userIds: platform``), a managed Redis on an AOF claim.

What the server and its controllers must then do, each once a hand-written rule of the fast
tests: admit every pod (the init container that copies the model included) under both the quota
and "restricted"; create the Redis pod, whose ``controller-revision-hash`` label
(``<name>-redis-<hash>``) is then 63 characters, the most a label value holds; and compute a
disruption budget that lets a node drain evict the one Redis pod (the eviction API answers 201).
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from support.cluster_operator import OperatorProcess, give_password
from support.plane import Plane, until
from support.processes import RedisProcess

from cachefleet.operator.manifests.names import MAX_NAME_LENGTH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "platform"
NAME = "p" * MAX_NAME_LENGTH
RESOURCES = {"requests": {"cpu": "250m", "memory": "512Mi"},
             "limits": {"cpu": "1", "memory": "1Gi"}}  # fmt: skip
QUOTA = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "compute", "namespace": NAMESPACE},
    "spec": {"hard": {"requests.cpu": "8", "requests.memory": "16Gi", "limits.cpu": "16",
                      "limits.memory": "32Gi"}},
}  # fmt: skip
SERVICE = {
    "apiVersion": "cachefleet.io/v1alpha1",
    "kind": "CachedInferenceService",
    "metadata": {"name": NAME, "namespace": NAMESPACE},
    "spec": {
        "replicas": 1,
        "userIds": "platform",
        "model": {"name": "simple", "repository": {"image": {
            "image": "ghcr.io/cachefleet/cachefleet:0.4.0", "path": "/opt/cachefleet-samples",
            "sizeLimit": "64Mi"}}},
        "runtime": {"resources": RESOURCES},
        "cache": {"mode": "tiered", "redis": {
            "resources": RESOURCES, "persistence": {"mode": "aof", "size": "1Gi"}}},
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def platform_namespace(installed: Plane) -> Plane:
    plane = installed
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    plane.apply([QUOTA])
    return plane  # (deleted at the module's end: ``nothing_left_behind``)


def _password(plane: Plane) -> str | None:
    done = plane.kubectl("get", "secret", f"{NAME}-redis-auth", "-n", NAMESPACE, "-o",
                         "jsonpath={.data.password}", check=False)  # fmt: skip
    return base64.b64decode(done.stdout).decode() if done.returncode == 0 and done.stdout else None


def _budget(plane: Plane) -> dict[str, Any] | None:
    status = plane.get(f"pdb/{NAME}-redis", "-n", NAMESPACE).get("status") or {}
    return status if status.get("disruptionsAllowed", 0) >= 1 else None


def test_the_longest_name_under_quota_and_restricted_is_ready_and_drainable(
    platform_namespace: Plane, operator: OperatorProcess, stand_in_redis: RedisProcess
) -> None:
    plane = platform_namespace
    plane.apply([SERVICE])
    password = until(lambda: _password(plane), "the managed Redis's password", 120)
    assert password is not None
    give_password(stand_in_redis, password)
    until(lambda: plane.condition(f"cis/{NAME}", NAMESPACE, "Ready") == "True",
          f"{NAME} Ready\n{operator.log[-3000:]}", timeout_s=300)  # fmt: skip
    # Every pod admitted under the quota and "restricted", the init container included.
    pods = plane.get("pods", "-n", NAMESPACE)["items"]
    assert {p["metadata"]["name"] for p in pods} >= {f"{NAME}-redis-0"}
    assert len(pods) == 2
    assert all(p["status"]["phase"] == "Running" for p in pods)
    quota = plane.get("resourcequota/compute", "-n", NAMESPACE)["status"]["used"]
    assert quota["limits.memory"] != "0"
    # The Redis pod's revision label is as long as a label value may be.
    [redis] = [p for p in pods if p["metadata"]["name"] == f"{NAME}-redis-0"]
    revision = redis["metadata"]["labels"]["controller-revision-hash"]
    assert revision.startswith(f"{NAME}-redis-")
    assert len(revision) <= 63

    budget = until(lambda: _budget(plane), "the Redis budget allowing a disruption", 120)
    assert budget is not None
    assert (budget["expectedPods"], budget["currentHealthy"]) == (1, 1)
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": f"{NAME}-redis-0", "namespace": NAMESPACE}}  # fmt: skip
    with plane.http() as api:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{NAME}-redis-0/eviction"
        evicted = api.post(path, json=eviction)
    assert evicted.status_code == 201, evicted.text
