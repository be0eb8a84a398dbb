"""The managed Redis's claim on the real control plane: the deliberate paths for the immutable
``volumeClaimTemplates`` of its StatefulSet (``operator/reconcile/claims.py``), taken against
the server's own refusals (the StatefulSet validation, the PersistentVolumeClaimResize
admission) and the real PV binder.

- on a class that allows expansion (``expandable``), a larger size grows the claim and re-creates
  the StatefulSet (orphaning its pod); another class then stalls, saying what to do;
- on the default class (no expansion), a larger size stalls with the server's refusal, and
  nothing is deleted; switching persistence off then deletes the claim nothing uses any more.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from support.cluster_operator import OperatorProcess, give_password
from support.plane import Plane, until
from support.processes import RedisProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "claims"


@pytest.fixture(scope="module")
def claims(installed: Plane, operator: OperatorProcess, stand_in_redis: RedisProcess) -> Plane:
    installed.kubectl("create", "namespace", NAMESPACE)
    return installed


def _service(name: str, persistence: dict[str, Any] | None) -> dict[str, Any]:
    redis: dict[str, Any] = {} if persistence is None else {"persistence": persistence}
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"replicas": 1, "model": {"name": "simple", "repository": {"image": {
            "image": "ghcr.io/cachefleet/cachefleet:0.4.0", "path": "/opt/cachefleet-samples"}}},
            "cache": {"mode": "tiered", "redis": redis}},
    }  # fmt: skip


def _ready(plane: Plane, name: str, operator: OperatorProcess, redis: RedisProcess) -> None:
    def password() -> str | None:
        done = plane.kubectl("get", "secret", f"{name}-redis-auth", "-n", NAMESPACE, "-o",
                             "jsonpath={.data.password}", check=False)  # fmt: skip
        return base64.b64decode(done.stdout).decode() if done.stdout else None

    found = until(password, f"{name}'s Redis password")
    assert found is not None
    give_password(redis, found)
    until(lambda: plane.condition(f"cis/{name}", NAMESPACE, "Ready") == "True",
          f"{name} Ready\n{operator.log[-3000:]}", timeout_s=300)  # fmt: skip


def _persistence(plane: Plane, name: str, **fields: Any) -> None:
    patch = {"spec": {"cache": {"redis": {"persistence": fields}}}}
    plane.kubectl("patch", f"cis/{name}", "-n", NAMESPACE, "--type=merge", "-p", json.dumps(patch))


def _uid(plane: Plane, resource: str) -> str | None:
    done = plane.kubectl("get", resource, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}",
                         check=False)  # fmt: skip
    return done.stdout or None


def _template_size(plane: Plane, name: str) -> str | None:
    done = plane.kubectl("get", f"statefulset/{name}-redis", "-n", NAMESPACE, "-o", "json",
                         check=False)  # fmt: skip
    if done.returncode != 0:
        return "gone"  # between the orphaning delete and the re-create
    templates = json.loads(done.stdout)["spec"].get("volumeClaimTemplates") or []
    return str(templates[0]["spec"]["resources"]["requests"]["storage"]) if templates else None


def _stalled(plane: Plane, name: str, text: str) -> str | None:
    status = plane.get(f"cis/{name}", "-n", NAMESPACE).get("status") or {}
    for condition in status.get("conditions") or []:
        stalled = condition["type"] == "Stalled" and condition["status"] == "True"
        if stalled and text in condition.get("message", ""):
            return str(condition["message"])
    return None


def _ready_again(plane: Plane, name: str, operator: OperatorProcess) -> None:
    try:
        until(lambda: plane.condition(f"cis/{name}", NAMESPACE, "Ready") == "True",
              f"{name} Ready again", timeout_s=240)  # fmt: skip
    except AssertionError as failed:
        status = plane.get(f"cis/{name}", "-n", NAMESPACE).get("status") or {}
        conditions = json.dumps(status.get("conditions"), indent=1)
        objects = plane.kubectl("get", "statefulsets,pods,pvc", "-n", NAMESPACE, "-o", "wide",
                                check=False).stdout  # fmt: skip
        events = plane.kubectl("get", "events", "-n", NAMESPACE, check=False).stdout
        raise AssertionError(f"{failed}\n{conditions}\n{objects}\n{events[-4000:]}") from None


def _claim_request(plane: Plane, claim: str) -> str:
    found = plane.get(f"pvc/{claim}", "-n", NAMESPACE)
    return str(found["spec"]["resources"]["requests"]["storage"])


def test_an_expandable_claim_grows_and_another_class_stalls(
    claims: Plane, operator: OperatorProcess, stand_in_redis: RedisProcess
) -> None:
    plane, name = claims, "grows"
    claim = f"data-{name}-redis-0"
    plane.apply([_service(name, {"mode": "aof", "size": "1Gi", "storageClassName": "expandable"})])
    _ready(plane, name, operator, stand_in_redis)
    statefulset, claim_uid = _uid(plane, f"statefulset/{name}-redis"), _uid(plane, f"pvc/{claim}")

    _persistence(plane, name, size="2Gi")
    until(lambda: _template_size(plane, name) == "2Gi",
          f"the StatefulSet re-created with a 2Gi template\n{operator.log[-3000:]}")  # fmt: skip
    assert _uid(plane, f"statefulset/{name}-redis") != statefulset
    assert _uid(plane, f"pvc/{claim}") == claim_uid  # the same claim, grown: the cache kept
    assert _claim_request(plane, claim) == "2Gi"
    _ready_again(plane, name, operator)

    recreated = _uid(plane, f"statefulset/{name}-redis")
    _persistence(plane, name, storageClassName="standard")
    message = until(lambda: _stalled(plane, name, "storageClassName"), "Stalled on the class")
    assert message is not None
    assert "cannot change from expandable to standard" in message
    assert f"delete the StatefulSet {name}-redis" in message
    assert _uid(plane, f"statefulset/{name}-redis") == recreated
    assert _uid(plane, f"pvc/{claim}") == claim_uid


def test_a_claim_the_class_cannot_expand_stalls_and_persistence_off_deletes_it(
    claims: Plane, operator: OperatorProcess, stand_in_redis: RedisProcess
) -> None:
    plane, name = claims, "fixed"
    claim = f"data-{name}-redis-0"
    plane.apply([_service(name, {"mode": "aof", "size": "1Gi"})])
    _ready(plane, name, operator, stand_in_redis)
    statefulset = _uid(plane, f"statefulset/{name}-redis")

    _persistence(plane, name, size="2Gi")
    message = until(lambda: _stalled(plane, name, "allowVolumeExpansion"), "Stalled on growth")
    assert message is not None
    assert claim in message
    # The server's own refusal, passed on.
    assert "only dynamically provisioned pvc can be resized" in message
    assert plane.condition(f"cis/{name}", NAMESPACE, "Ready") == "False"
    assert _uid(plane, f"statefulset/{name}-redis") == statefulset
    assert _template_size(plane, name) == "1Gi"
    assert _claim_request(plane, claim) == "1Gi"

    _persistence(plane, name, mode="none", size="1Gi")
    until(lambda: _uid(plane, f"pvc/{claim}") is None, f"the claim deleted\n{operator.log[-3000:]}")
    until(lambda: _template_size(plane, name) is None, "the StatefulSet without a claim template")
    _ready_again(plane, name, operator)
