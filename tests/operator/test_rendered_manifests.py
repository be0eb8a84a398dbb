"""What the operator renders, checked on the rendered objects: names refused before any child is
made, an init container that would copy nothing, a rollout that needs a spare GPU, pods that keep
an old Redis password, the operator's namespace and RBAC.

What the API server makes of these objects is seen on the real control plane
(``tests/cluster/``): every example's children accepted and Ready
(``test_cluster_examples.py``), the longest accepted name's Redis pod created, its revision label
at 63 characters, and its disruption budget letting a drain evict it
(``test_cluster_platform.py``); a name one longer gets no pod (``test_cluster_api_rules.py``).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from delivery.support import RELEASE, Helm, only, require_tool
from support.kube.crd_schema import cel_failures

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import CONFIG_HASH_ANNOTATION, Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

ROOT = Path(__file__).resolve().parents[2]
UID = "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11"
BASE: dict[str, Any] = {
    "replicas": 2,
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
}


def render(
    extra: dict[str, Any] | None = None, *, name: str = "svc", password: str | None = "s3cret"
) -> list[dict[str, Any]]:
    spec = parse_spec({**copy.deepcopy(BASE), **copy.deepcopy(extra or {})})
    return build_children(
        spec, owner=Owner(name, "ml", UID), redis_password=password, cache_secret="c" * 32
    )


def one(children: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == kind and name in (None, c["metadata"]["name"])]
    return found


def pod_hash(children: list[dict[str, Any]], kind: str) -> str:
    return str(one(children, kind)["spec"]["template"]["metadata"]["annotations"][
        CONFIG_HASH_ANNOTATION
    ])  # fmt: skip


def cis(name: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {**copy.deepcopy(BASE), **(spec or {})},
    }


# --- names (defect 8) ------------------------------------------------------------------------

BAD_NAMES = {
    "a" * 47: "at most 46",
    "a" * 49: "at most 46",
    "1model": "cannot name a Service",
    "my.model": "cannot name a Service",
    "Model": "cannot name a Service",
    "model-": "cannot name a Service",
    "foo-redis": "ends with '-redis'",
    "foo-redis-headless": "ends with '-redis-headless'",
}


@pytest.mark.parametrize("name", BAD_NAMES)
def test_names_that_make_invalid_children_are_refused_naming_the_field(name: str) -> None:
    with pytest.raises(SpecError, match=r"metadata\.name") as refused:
        render(name=name)
    assert BAD_NAMES[name] in str(refused.value)
    assert cel_failures(cis(name)), "the CRD should refuse it too"


def test_render_command_names_the_field_for_an_unusable_name(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(yaml.safe_dump(cis("x" * 50)))
    result = subprocess.run(
        [sys.executable, "-m", "cachefleet.cli.main", "render", str(path)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "metadata.name" in result.stderr
    assert result.stdout == ""


# --- the model repository from an image (defect 2) -------------------------------------------


def _under(path: str, directory: str) -> bool:
    path, directory = path.rstrip("/") + "/", directory.rstrip("/") + "/"
    return path.startswith(directory)


@pytest.mark.parametrize("source", [None, "/models", "/models/", "/opt/repo", "/"])
def test_the_copy_reads_the_image_path_not_the_empty_volume_mounted_over_it(
    source: str | None,
) -> None:
    image: dict[str, Any] = {"image": "models:1"}
    if source is not None:
        image["path"] = source
    children = render({"model": {"name": "m", "repository": {"image": image}}})
    pod = one(children, "Deployment")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    [mount] = init["volumeMounts"]
    script = init["command"][-1]
    copied_from = re.search(r'cp -R "([^"]*)/\." (\S+)/', script)
    assert copied_from is not None, script
    read, write = copied_from.group(1) or "/", copied_from.group(2)
    assert read == (source or "/models").rstrip("/") or read == "/"
    assert write == mount["mountPath"]
    # The emptyDir must not hide the image's files: the mount may not cover what is read.
    assert not _under(read, mount["mountPath"])
    server = pod["containers"][0]
    models = next(m for m in server["volumeMounts"] if m["name"] == "models")
    assert models["mountPath"] == "/models"  # where `cachefleet serve` looks
    assert mount["name"] == models["name"]


# --- rollouts on a full GPU pool (defect 11) -------------------------------------------------


def test_gpu_pods_roll_without_a_surge_pod() -> None:
    gpu = one(render({"runtime": {"gpus": 1}}), "Deployment")["spec"]
    assert gpu["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    # Without GPUs the server's default (25% surge) stays: faster, and it needs no spare GPU.
    assert "strategy" not in one(render(), "Deployment")["spec"]


# --- password rotation (defect 9) ------------------------------------------------------------


def test_a_rotated_user_password_rolls_redis_and_the_runtime() -> None:
    own = {"cache": {"redis": {"auth": {"passwordSecretRef": {"name": "mine"}}}}}
    first, second = render(own, password="first-Pa55"), render(own, password="second-Pa55")
    # The user's Secret is not ours: only the generated cache secret is.
    assert {c["metadata"]["name"] for c in first if c["kind"] == "Secret"} == {"svc-fleet"}
    assert pod_hash(first, "StatefulSet") != pod_hash(second, "StatefulSet")
    assert pod_hash(first, "Deployment") != pod_hash(second, "Deployment")
    assert "first-Pa55" not in str(first)


def test_a_rotated_external_redis_password_rolls_the_runtime() -> None:
    external = {
        "cache": {
            "mode": "redis",
            "redis": {"external": {"url": "redis://r:6379", "passwordSecretRef": {"name": "s"}}},
        }
    }
    first, second = render(external, password="one"), render(external, password="two")
    assert pod_hash(first, "Deployment") != pod_hash(second, "Deployment")


# --- the operator's namespace (defect 7) -----------------------------------------------------


def _admitted_namespace(children: list[dict[str, Any]]) -> str:
    policy = one(children, "NetworkPolicy")["spec"]
    [rule] = policy["ingress"]
    operator = rule["from"][1]
    return str(operator["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"])


def test_redis_admits_the_operator_from_the_namespace_it_runs_in() -> None:
    settings = OperatorSettings.from_environ({"CACHEFLEET_OPERATOR_NAMESPACE": "platform"})
    reconciler = Reconciler(Kube(), settings)
    spec = parse_spec(copy.deepcopy(BASE))
    children = reconciler.build(spec, Owner("svc", "ml", UID), "p", "c" * 32)
    assert _admitted_namespace(children) == "platform"
    named = parse_spec({**copy.deepcopy(BASE), "cache": {"redis": {"networkPolicy": {
        "operatorNamespace": "ops"}}}})  # fmt: skip
    rebuilt = reconciler.build(named, Owner("svc", "ml", UID), "p", "c" * 32)
    assert _admitted_namespace(rebuilt) == "ops"


def test_the_chart_tells_the_operator_its_namespace() -> None:
    helm = Helm(require_tool("helm", "run scripts/get-helm"))
    deployment = only(helm.template(), "Deployment", f"{RELEASE}-operator")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container.get("env", [])}
    assert env["CACHEFLEET_OPERATOR_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }


# --- RBAC and documented settings (defects 13, 14) -------------------------------------------


def test_rbac_allows_owner_references_that_block_owner_deletion() -> None:
    rules = yaml.safe_load((ROOT / "operator" / "rbac.yaml").read_text())
    assert any(
        "cachedinferenceservices/finalizers" in rule["resources"] and "update" in rule["verbs"]
        for rule in rules
    )
    [reference] = one(render(), "Deployment")["metadata"]["ownerReferences"]
    assert reference["blockOwnerDeletion"] is True


def test_every_operator_variable_the_chart_documents_is_read_by_the_operator() -> None:
    documented = set(
        re.findall(
            r"CACHEFLEET_OPERATOR_[A-Z_]+", (ROOT / "charts/cachefleet/values.yaml").read_text()
        )
    )
    assert documented
    code = "\n".join(p.read_text() for p in (ROOT / "operator").rglob("*.py"))
    assert {v for v in documented if f'"{v}"' not in code} == set()
