"""spec.server on a real control plane: both server examples stored by the real API server under
today's CRD, their runtime pods admitted in a namespace that enforces the restricted Pod
Security standard (two containers for kind triton, the GPU on Triton's, placed on the GPU node
by the real scheduler; cachefleet alone for kind external), each service Ready as the other
examples become (kwok reports the pods' containers ready); and a bad combination refused by the
real server's CEL with the CRD's message."""

from __future__ import annotations

import base64
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


CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIBprivateCAexample\n-----END CERTIFICATE-----\n"
TOKENS = ("Bearer rotating-one-Vb7nK2qX9", "Bearer rotating-two-Jt4wP8mZ3")


def template_annotations(plane: Plane, name: str) -> dict[str, str]:
    deployment = plane.get("deployment", name, "-n", NAMESPACE)
    return dict(deployment["spec"]["template"]["metadata"]["annotations"])


def replica_sets(plane: Plane, name: str) -> set[str]:
    selector = f"app.kubernetes.io/instance={name},app.kubernetes.io/component=runtime"
    found = plane.get("replicasets", "-n", NAMESPACE, "-l", selector)["items"]
    return {r["metadata"]["name"] for r in found}


def test_a_private_ca_is_mounted_and_a_rotated_token_rolls_the_pods_through_real_rbac(
    operator: OperatorProcess, installed: Plane
) -> None:
    """The operator reads the token's Secret and the CA's ConfigMap by name under its own
    ServiceAccount (``get`` only on Secrets), mounts the CA read-only in a pod the restricted
    standard admits, and a new token makes a new ReplicaSet; the token is in no object but its
    Secret. A CA on a plain url is refused by the real server's CEL."""
    plane = installed
    if NAMESPACE not in plane.namespaces():
        plane.kubectl("create", "namespace", NAMESPACE)
        plane.kubectl(
            "label", "namespace", NAMESPACE, "pod-security.kubernetes.io/enforce=restricted"
        )
    plane.kubectl("create", "configmap", "inference-ca", "-n", NAMESPACE,
                  f"--from-literal=ca.crt={CA_PEM}")  # fmt: skip
    plane.kubectl("create", "secret", "generic", "rotating-token", "-n", NAMESPACE,
                  f"--from-literal=token={TOKENS[0]}")  # fmt: skip
    service = example("external-upstream")
    service["metadata"]["name"] = "rotating"
    service["spec"]["server"].update(
        url="grpcs://triton.inference.svc:8001",
        authSecretRef={"name": "rotating-token", "key": "token"},
        tls={"caConfigMapRef": {"name": "inference-ca"}},
    )
    plane.apply([service], "-n", NAMESPACE)
    until(functools.partial(ready, plane, "rotating"), f"rotating Ready\n{operator.log[-3000:]}",
          timeout_s=300)  # fmt: skip

    [pod] = runtime_pods(plane, "rotating")
    [server] = pod["spec"]["containers"]
    assert server["command"][server["command"].index("--upstream-tls-ca-file") + 1] == (
        "/etc/cachefleet/upstream-ca/ca.crt"
    )
    [mount] = [m for m in server["volumeMounts"] if m["name"] == "upstream-ca"]
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "upstream-ca"]
    assert volume["configMap"]["name"] == "inference-ca"
    digest = template_annotations(plane, "rotating")["cachefleet.io/upstream-hash"]
    before = replica_sets(plane, "rotating")

    # The rotation; a change of the service stands in for the resync (5 minutes here).
    token = base64.b64encode(TOKENS[1].encode()).decode()
    plane.kubectl("patch", "secret", "rotating-token", "-n", NAMESPACE, "--type", "merge",
                  "-p", json.dumps({"data": {"token": token}}))  # fmt: skip
    plane.kubectl("patch", "cis", "rotating", "-n", NAMESPACE, "--type", "merge",
                  "-p", json.dumps({"spec": {"replicas": 2}}))  # fmt: skip
    until(
        lambda: template_annotations(plane, "rotating")["cachefleet.io/upstream-hash"] != digest,
        f"the rotated token in the pod template\n{operator.log[-3000:]}",
        timeout_s=300,
    )
    until(lambda: replica_sets(plane, "rotating") - before, "a new ReplicaSet", timeout_s=300)
    until(functools.partial(ready, plane, "rotating"), "rotating Ready again", timeout_s=300)

    stored = json.dumps(
        [plane.get(kind, "-n", NAMESPACE) for kind in ("deployments", "replicasets", "pods",
                                                       "configmaps", "events", "cis")]
    )  # fmt: skip
    for value in TOKENS:
        assert value not in stored
        assert base64.b64encode(value.encode()).decode() not in stored
    for word in ("rotating-one", "rotating-two"):
        assert word not in operator.log

    bad = example("external-upstream")
    bad["metadata"]["name"] = "ca-on-plain-grpc"
    bad["spec"]["server"]["tls"] = {"caConfigMapRef": {"name": "inference-ca"}}
    done = plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert "server.tls needs a grpcs:// or https:// server.url" in done.stderr


def test_a_triton_fleet_autoscales_on_forwarded_calls_and_an_external_one_may_not(
    operator: OperatorProcess, installed: Plane
) -> None:
    """The real server stores metric forwarded for kind triton and the operator's HPA on the
    Pods metric with it; for kind external the server's CEL refuses it with the CRD's message."""
    plane = installed
    if NAMESPACE not in plane.namespaces():
        plane.kubectl("create", "namespace", NAMESPACE)
    triton = example("triton-upstream")
    triton["metadata"]["name"] = "triton-scaled"
    triton["spec"]["model"]["repository"] = {"image": {"image": "registry.example.com/m:1"}}
    triton["spec"]["autoscaling"] = {"metric": "forwarded", "target": 30, "maxReplicas": 3}
    plane.apply([triton], "-n", NAMESPACE)

    def hpa() -> dict[str, Any] | None:
        found = plane.kubectl("get", "hpa", "triton-scaled", "-n", NAMESPACE, "-o", "json",
                              check=False)  # fmt: skip
        return json.loads(found.stdout) if found.returncode == 0 else None

    scaler = until(hpa, f"the HPA\n{operator.log[-3000:]}", timeout_s=300)
    assert scaler is not None
    [metric] = scaler["spec"]["metrics"]
    assert metric["pods"]["metric"]["name"] == "cachefleet_forwarded_per_second"

    bad = example("external-upstream")
    bad["metadata"]["name"] = "external-scaled"
    bad["spec"]["autoscaling"] = {"metric": "forwarded", "target": 30, "maxReplicas": 3}
    done = plane.kubectl("apply", "-n", NAMESPACE, "-f", "-", stdin=json.dumps(bad), check=False)
    assert done.returncode != 0
    assert "autoscaling.metric forwarded needs server kind triton" in done.stderr
