"""spec.server on a real control plane: both server examples stored by the real API server under
today's CRD, their runtime pods admitted in a namespace that enforces the restricted Pod
Security standard (two containers for kind triton, the GPU on Triton's, placed on the GPU node
by the real scheduler; cachefleet alone for kind external), each service Ready as the other
examples become (kwok reports the pods' containers ready); and a bad combination refused by the
real server's CEL with the CRD's message."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
import yaml
from support.cluster_operator import OperatorProcess
from support.plane import ROOT, Plane, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMESPACE = "upstreams"


def example(name: str) -> dict[str, Any]:
    """An example with one replica and the local cache only: no Redis (the stand-in Redis of
    the session is the other tests'), which changes nothing of the runtime pod's containers."""
    service: dict[str, Any] = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    service["spec"]["replicas"] = 1
    service["spec"]["cache"] = {"mode": "local", "local": {"size": "64Mi"}}
    return service


def runtime_pods(plane: Plane, name: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={name},app.kubernetes.io/component=runtime"
    found: list[dict[str, Any]] = plane.get("pods", "-n", NAMESPACE, "-l", selector)["items"]
    return found


def ready(plane: Plane, name: str) -> bool:
    return plane.condition(f"cis/{name}", NAMESPACE, "Ready") == "True"


def test_both_server_kinds_are_admitted_under_restricted_pod_security_and_become_ready(
    operator: OperatorProcess, installed: Plane
) -> None:
    plane = installed
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted")
    plane.kubectl("create", "secret", "generic", "triton-token", "-n", NAMESPACE,
                  "--from-literal=token=Bearer example")  # fmt: skip
    triton = example("triton-upstream")
    # The claim of the example stands for the user's; an image copy needs no volume to bind.
    triton["spec"]["model"]["repository"] = {"image": {"image": "registry.example.com/m:1"}}
    external = example("external-upstream")
    plane.apply([triton, external], "-n", NAMESPACE)

    for name in ("triton-densenet", "cached-triton"):
        until(
            functools.partial(ready, plane, name),
            f"{name} Ready\n{operator.log[-3000:]}",
            timeout_s=300,
        )
        assert plane.condition(f"cis/{name}", NAMESPACE, "RuntimeReady") == "True"

    [pod] = runtime_pods(plane, "triton-densenet")
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    assert list(containers) == ["server", "triton"]
    assert containers["triton"]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "nvidia.com/gpu" not in containers["server"]["resources"].get("limits", {})
    assert pod["spec"]["nodeName"] == "kwok-gpu-0"
    assert all(s["ready"] for s in pod["status"]["containerStatuses"])

    [pod] = runtime_pods(plane, "cached-triton")
    [server] = pod["spec"]["containers"]
    assert "--upstream" in server["command"]
    assert "models" not in {v["name"] for v in pod["spec"]["volumes"]}

    bad = example("external-upstream")
    bad["metadata"]["name"] = "external-with-files"
    bad["spec"]["model"]["repository"] = {"pvc": {"claimName": "models"}}
    done = plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert "server kind external serves the external server's models" in done.stderr
