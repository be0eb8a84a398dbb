"""What a service's status tells on a real control plane, under the session's operator.

- Pod problems as a kubelet reports them, played by the project's kwok stages
  (``support/kwok_stages``): a runtime image that cannot be pulled (``ImagePullBackOff``) and a
  Redis that crash-loops (``CrashLoopBackOff``) reach the service's conditions, with the
  kubelet's reason and message, while the pods are still starting (the status follows the
  pods' watch, not the rollout's ten-minute deadline).
- The status subresource: a user's write to ``.status`` through the main resource is dropped
  by the API server, and the operator's status stands.
- An immutable StatefulSet field: a larger Redis volume, refused by the API server (the claim
  template) and then by the claim's storage class (no volume expansion), and another storage
  class; the service is Stalled with what to do, as ``reconcile/claims.py`` documents, and
  recovers when the spec is put back.

Polled with generous deadlines; nothing here measures time.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
import yaml
from support.cluster_operator import give_password, redis_password
from support.plane import ROOT, Plane, until
from support.processes import RedisProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
NAMESPACE = "told"
#: Images the project's kwok stages fail: never pulled, and always crashing.
UNPULLABLE = "registry.invalid/cachefleet/cachefleet:missing"
CRASHING = "crash.invalid/redis:7.4-alpine"


@pytest.fixture(scope="module")
def told(plane: Plane, operator: object) -> Plane:
    """The module's namespace (deleted at its end: ``nothing_left_behind``)."""
    plane.kubectl("create", "namespace", NAMESPACE)
    return plane


def _service(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The quickstart as ``name``, with ``spec``'s top-level sections merged in."""
    service: dict[str, Any] = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    service["metadata"].update(name=name, namespace=NAMESPACE)
    for section, value in spec.items():
        service["spec"][section] = {**(service["spec"].get(section) or {}), **value}
    return service


def _patch(plane: Plane, name: str, patch: dict[str, Any]) -> None:
    plane.kubectl("patch", f"cis/{name}", "-n", NAMESPACE, "--type=merge",
                  "-p", json.dumps(patch))  # fmt: skip


def _condition(plane: Plane, name: str, kind: str) -> dict[str, Any]:
    service = plane.get(f"cis/{name}", "-n", NAMESPACE)
    for condition in (service.get("status") or {}).get("conditions") or []:
        if condition["type"] == kind:
            found: dict[str, Any] = condition
            return found
    return {}


def _has(plane: Plane, name: str, kind: str, status: str, reason: str | None = None) -> bool:
    condition = _condition(plane, name, kind)
    return condition.get("status") == status and reason in (None, condition.get("reason"))


def _claim_bound(plane: Plane, name: str) -> bool:
    done = plane.kubectl("get", f"pvc/{name}", "-n", NAMESPACE, "-o", "json", check=False)
    return done.returncode == 0 and json.loads(done.stdout)["status"].get("phase") == "Bound"


def test_pod_problems_played_by_kwok_reach_the_status(told: Plane) -> None:
    plane = told
    plane.apply([
        _service("unpullable", {"runtime": {"image": UNPULLABLE}}),
        _service("crashing", {"cache": {"mode": "redis", "redis": {"image": CRASHING}}}),
    ])  # fmt: skip
    until(partial(_has, plane, "unpullable", "RuntimeReady", "False", "ImagePullBackOff"),
          "the unpullable runtime image in RuntimeReady")  # fmt: skip
    runtime = _condition(plane, "unpullable", "RuntimeReady")
    assert UNPULLABLE in runtime["message"]  # the kubelet's message, passed on
    assert _has(plane, "unpullable", "Ready", "False")
    until(partial(_has, plane, "crashing", "RedisReady", "False", "CrashLoopBackOff"),
          "the crash-looping Redis in RedisReady")  # fmt: skip
    redis = _condition(plane, "crashing", "RedisReady")["message"]
    assert "container redis" in redis  # its last exit, passed on
    assert "exit code 1" in redis
    assert _has(plane, "crashing", "Ready", "False")

    # Put right, the fleet rolls onto pods that start, and the problem leaves the status.
    image = _service("unpullable", {})["spec"]["model"]["repository"]["image"]["image"]
    _patch(plane, "unpullable", {"spec": {"runtime": {"image": image}}})
    until(partial(_has, plane, "unpullable", "Ready", "True"), "unpullable Ready once fixed")


def test_a_status_written_through_the_main_resource_is_dropped(told: Plane) -> None:
    plane = told
    until(partial(_has, plane, "unpullable", "Ready", "True"), "unpullable Ready")
    before = plane.get("cis/unpullable", "-n", NAMESPACE)
    forged = {"conditions": [{"type": "Ready", "status": "False", "reason": "Forged",
                              "message": "forged", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
              "url": "http://forged.example"}  # fmt: skip
    _patch(plane, "unpullable", {"status": forged, "metadata": {"labels": {"touched": "yes"}}})
    after = plane.get("cis/unpullable", "-n", NAMESPACE)
    assert after["metadata"]["labels"]["touched"] == "yes"  # the write itself went through
    assert after["status"] == before["status"]  # ... without its status
    assert after["metadata"]["generation"] == before["metadata"]["generation"]
    assert _condition(plane, "unpullable", "Ready")["reason"] != "Forged"


def test_an_immutable_statefulset_field_stalls_with_what_to_do(
    told: Plane, stand_in_redis: RedisProcess
) -> None:
    plane = told
    redis = {"persistence": {"mode": "rdb", "size": "1Gi"}}
    plane.apply([_service("persisted", {"cache": {"mode": "redis", "redis": redis}})])
    until(partial(_claim_bound, plane, "data-persisted-redis-0"), "the Redis claim bound")
    # The stand-in for its Redis pod takes its password, so that the reconciles succeed.
    password = until(partial(redis_password, plane, NAMESPACE, "persisted"), "the Redis password")
    assert password is not None
    give_password(stand_in_redis, password)

    def stalled_with(*pieces: str) -> bool:
        condition = _condition(plane, "persisted", "Stalled")
        message = str(condition.get("message") or "")
        return condition.get("status") == "True" and all(p in message for p in pieces)

    # Larger: the claim template is immutable (422), the claim cannot grow on this class (the
    # PersistentVolumeClaimResize admission's 403): Stalled, naming both and the way out.
    _patch(plane, "persisted", {"spec": {"cache": {"redis": {"persistence": {"size": "2Gi"}}}}})
    until(lambda: stalled_with("cannot grow to 2Gi", "allowVolumeExpansion"),
          "Stalled on the refused expansion")  # fmt: skip
    message = _condition(plane, "persisted", "Stalled")["message"]
    assert "only dynamically provisioned pvc can be resized" in message  # the server's words
    statefulset = plane.get("statefulset/persisted-redis", "-n", NAMESPACE)
    [template] = statefulset["spec"]["volumeClaimTemplates"]
    assert template["spec"]["resources"]["requests"]["storage"] == "1Gi"  # left as it was
    events = plane.get("events", "-n", NAMESPACE, "--field-selector",
                       "involvedObject.name=persisted,reason=ImmutableField")["items"]  # fmt: skip
    assert events, "no ImmutableField event"

    # Another storage class: an existing claim keeps its class.
    other = {"size": "1Gi", "storageClassName": "fast"}
    _patch(plane, "persisted", {"spec": {"cache": {"redis": {"persistence": other}}}})
    until(lambda: stalled_with("storageClassName cannot change", "to fast"),
          "Stalled on the other storage class")  # fmt: skip

    # Put back: no longer Stalled.
    back = {"size": "1Gi", "storageClassName": None}
    _patch(plane, "persisted", {"spec": {"cache": {"redis": {"persistence": back}}}})
    until(partial(_has, plane, "persisted", "Stalled", "False"), "no longer Stalled")
