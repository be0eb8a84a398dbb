"""GPU fleets on a real scheduler: ``examples/densenet-gpu-aof.yaml`` placed on the kwok node
with ``nvidia.com/gpu`` capacity and GPU labels, its AOF Redis claim bound to a static volume by
the real PV binder, Ready; and a GPU request no node can hold refused by the real scheduler, in
the service's status as ``Unschedulable`` with the scheduler's message."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from support.cluster_operator import OperatorProcess, give_password, redis_password
from support.plane import ROOT, Plane, until
from support.processes import RedisProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "gpus"


def _unschedulable(plane: Plane, name: str) -> dict[str, Any] | None:
    status = plane.get(f"cis/{name}", "-n", NAMESPACE).get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("reason") == "Unschedulable":
            found: dict[str, Any] = condition
            return found
    return None


def test_a_gpu_fleet_lands_on_the_gpu_node_and_one_too_big_is_unschedulable(
    operator: OperatorProcess, installed: Plane, stand_in_redis: RedisProcess
) -> None:
    plane = installed
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("apply", "-n", NAMESPACE, "-f", str(ROOT / "examples" / "densenet-gpu-aof.yaml"))
    password = until(
        lambda: redis_password(plane, NAMESPACE, "densenet"), "the managed Redis's password"
    )
    assert password is not None
    give_password(stand_in_redis, password)
    until(lambda: plane.condition("cis/densenet", NAMESPACE, "Ready") == "True",
          f"densenet Ready\n{operator.log[-3000:]}", timeout_s=300)  # fmt: skip
    pods = plane.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/instance=densenet")["items"]
    runtime = [p for p in pods if "redis" not in p["metadata"]["name"]]
    assert len(runtime) == 2
    assert {p["spec"]["nodeName"] for p in runtime} == {"kwok-gpu-0"}
    claims = plane.get("pvc", "-n", NAMESPACE)["items"]
    assert claims
    assert all(claim["status"]["phase"] == "Bound" for claim in claims)

    service = yaml.safe_load((ROOT / "examples" / "densenet-gpu-aof.yaml").read_text())
    service["metadata"]["name"] = "too-many-gpus"
    service["spec"]["runtime"]["gpus"] = 5  # the GPU node has 4
    service["spec"]["cache"] = {"mode": "local", "local": {"size": "64Mi"}}
    plane.apply([service], "-n", NAMESPACE)
    condition = until(lambda: _unschedulable(plane, "too-many-gpus"),
                      f"Unschedulable in the status\n{operator.log[-3000:]}", 180)  # fmt: skip
    assert condition is not None
    assert condition["status"] == "False"
    assert "Insufficient nvidia.com/gpu" in condition["message"]
    assert plane.condition("cis/too-many-gpus", NAMESPACE, "Ready") == "False"
