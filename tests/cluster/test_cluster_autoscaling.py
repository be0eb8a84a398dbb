"""An autoscaled fleet (``examples/autoscaling.yaml``) on a real control plane: its Deployment's
replicas belong to the autoscaler, and a scale through the scale subresource (what an HPA or
KEDA does; here ``kubectl scale``) is no drift of the operator's: no restore, no "Restored"
event, the replicas left as scaled.
"""

from __future__ import annotations

import pytest
from support.cluster_operator import OperatorProcess, give_password, redis_password
from support.plane import ROOT, Plane, until
from support.processes import RedisProcess

from cachefleet.operator.manifests.meta import MANAGER

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "scaled"
NAME = "densenet-autoscaled"
MODELS_CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "models", "namespace": NAMESPACE},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
}


def _restored(plane: Plane) -> list[str]:
    events = plane.get("events", "-n", NAMESPACE, "--field-selector",
                       f"involvedObject.name={NAME},reason=Restored")["items"]  # fmt: skip
    return [event["message"] for event in events]


def test_a_scale_of_an_autoscaled_fleet_is_not_restored(
    operator: OperatorProcess, installed: Plane, stand_in_redis: RedisProcess
) -> None:
    plane = installed
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.apply([MODELS_CLAIM])
    plane.kubectl("apply", "-n", NAMESPACE, "-f", str(ROOT / "examples" / "autoscaling.yaml"))
    # The stand-in for the managed Redis pod takes the password the operator generated.
    password = until(
        lambda: redis_password(plane, NAMESPACE, NAME), "the managed Redis's password Secret"
    )
    assert password is not None
    give_password(stand_in_redis, password)
    until(lambda: plane.condition(f"cis/{NAME}", NAMESPACE, "Ready") == "True",
          f"{NAME} Ready\n{operator.log[-3000:]}", timeout_s=300)  # fmt: skip
    hpa = plane.get(f"hpa/{NAME}", "-n", NAMESPACE)
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                             "name": NAME}  # fmt: skip

    plane.kubectl("scale", f"deployment/{NAME}", "-n", NAMESPACE, "--replicas=5")

    # The operator follows the Deployment's events into the service's status: once it shows
    # five ready replicas, it has handled every event of the scale (each child's events are
    # handled in order).
    until(lambda: plane.get(f"cis/{NAME}", "-n", NAMESPACE).get("status", {})
          .get("readyReplicas") == 5, "five ready replicas in the service's status",
          timeout_s=180)  # fmt: skip
    # Neither the HPA controller's own scale to minReplicas nor this one was taken for an edit
    # (an event of either would be here: the operator posts one "Restored" per window).
    assert _restored(plane) == [], operator.log[-3000:]
    deployment = plane.get(f"deployment/{NAME}", "-n", NAMESPACE, "--show-managed-fields")
    assert deployment["spec"]["replicas"] == 5
    # Field ownership as the server computes it: the operator's apply owns the template and
    # not the replicas, so nothing of the operator's conflicts with the autoscaler's writes.
    owners = {(entry["manager"], entry["operation"]): entry.get("fieldsV1", {}).get("f:spec", {})
              for entry in deployment["metadata"]["managedFields"]}  # fmt: skip
    operator_fields = owners[(MANAGER, "Apply")]
    assert "f:template" in operator_fields
    assert "f:replicas" not in operator_fields
