"""Every example in ``examples/`` applied with kubectl to the real control plane, as its comments
tell a user to (the Secrets and the model claim it names made first), reaching its conditions on
kwok's nodes under the session's operator.

The namespace enforces the Pod Security "restricted" standard, so every pod an example makes is
admitted by the server's own PodSecurity admission (the rule ``support.kube.api_rules`` once
encoded by hand). The plane runs no KEDA, so ``autoscaling-keda-misses.yaml`` reaches what a
cluster without KEDA shows: Stalled, saying KEDA is not installed. The examples in
``examples/kserve/`` and ``examples/gitops/`` are objects of KServe, Argo CD and Flux, which
this plane does not serve; their own tests read them (``tests/delivery``, ``tests/kserve_sdk``).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster_operator import OperatorProcess, give_password
from support.plane import ROOT, Plane, until
from support.processes import RedisProcess

from cachefleet.operator.manifests.spec import parse_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "examples"
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
#: The Secrets the examples name, as their comments tell a user to create them.
SECRETS = {
    "redis-secret": {"password": "cluster-Pa55"},
    "redis-password": {"password": "sentinel-Pa55"},
    "shared-redis": {"password": "shared-Pa55"},
    "s3-credentials": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "key",
                       "AWS_DEFAULT_REGION": "us-east-1"},
    "otlp-headers": {"headers": "x-api-key=key"},
}  # fmt: skip
MODELS_CLAIM = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {"name": "models", "namespace": NAMESPACE},
    "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}},
}
#: Conditions other than Ready=True an example reaches on this plane, with a part of the message.
EXPECTED = {"autoscaling-keda-misses.yaml": ("Stalled", "True", "KEDA is not installed")}


@pytest.fixture(scope="module")
def examples_namespace(installed: Plane) -> Plane:
    plane = installed
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    for name, data in SECRETS.items():
        literals = [f"--from-literal={key}={value}" for key, value in data.items()]
        plane.kubectl("create", "secret", "generic", name, "-n", NAMESPACE, *literals)
    plane.apply([MODELS_CLAIM])
    return plane  # (deleted at the module's end: ``nothing_left_behind``)


def _service(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def _password(plane: Plane, name: str) -> str | None:
    done = plane.kubectl("get", "secret", f"{name}-redis-auth", "-n", NAMESPACE, "-o",
                         "jsonpath={.data.password}", check=False)  # fmt: skip
    return base64.b64decode(done.stdout).decode() if done.returncode == 0 and done.stdout else None


def _condition(plane: Plane, name: str, kind: str) -> dict[str, Any] | None:
    status = plane.get(f"cis/{name}", "-n", NAMESPACE).get("status") or {}
    found = [c for c in status.get("conditions") or [] if c.get("type") == kind]
    return found[0] if found else None


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_example_reaches_its_conditions(
    path: Path,
    examples_namespace: Plane,
    operator: OperatorProcess,
    stand_in_redis: RedisProcess,
) -> None:
    plane = examples_namespace
    service = _service(path)
    name = service["metadata"]["name"]
    plane.kubectl("apply", "-n", NAMESPACE, "-f", str(path))
    if parse_spec(service["spec"]).cache.managed_redis:
        password = until(lambda: _password(plane, name), f"{name}'s Redis password", 120)
        assert password is not None
        give_password(stand_in_redis, password)
    kind, status, message = EXPECTED.get(path.name, ("Ready", "True", ""))

    def reached() -> dict[str, Any] | None:
        found = _condition(plane, name, kind)
        return found if found and found["status"] == status else None

    condition = until(reached, f"{name}: {kind}={status}\n{operator.log[-3000:]}", 300)
    assert condition is not None
    assert message in condition["message"]
    if kind == "Ready":
        # Every pod admitted under "restricted", scheduled on a kwok node and running there.
        selector = f"app.kubernetes.io/instance={name}"
        pods = plane.get("pods", "-n", NAMESPACE, "-l", selector)["items"]
        assert pods
        assert {p["status"].get("phase") for p in pods} == {"Running"}
        assert all(p["spec"]["nodeName"].startswith("kwok-") for p in pods)
    plane.kubectl("delete", "cis", name, "-n", NAMESPACE, "--wait=false")
