"""The GitOps health checks, run against their own test cases.

Argo CD's Lua check runs in Lua 5.1 (Argo CD embeds gopher-lua, a Lua 5.1), the way Argo CD's
resource-customizations tests run it: ``obj`` set to the test object, the script's returned
table compared with ``health_test.yaml``. Flux's ``healthCheckExprs`` run in a CEL interpreter
on the same objects, in Flux's order, and must reach the same verdicts. Both also read statuses
built by the operator's own condition code, so a change there that the checks misread fails here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from celpy.adapter import json_to_cel
from celpy.evaluation import CELEvalError
from lupa.lua51 import LuaRuntime

from cachefleet.operator.reconcile.conditions import (
    Condition,
    render_conditions,
    stalled_conditions,
    summary_conditions,
)
from cachefleet.operator.render_command import render_file
from delivery.support import REPO

GITOPS = REPO / "examples" / "gitops"
CHECK = GITOPS / "argocd" / "resource_customizations" / "cachefleet.io" / "CachedInferenceService"
CRD = REPO / "crds" / "cachedinferenceservices.cachefleet.io.yaml"
#: Argo CD's verdicts and their kstatus counterparts, which Flux reports.
KSTATUS = {"Healthy": "Current", "Progressing": "InProgress", "Degraded": "Failed"}

Case = dict[str, Any]


def cases() -> list[Case]:
    tests: list[Case] = yaml.safe_load((CHECK / "health_test.yaml").read_text())["tests"]
    return tests


def load_object(case: Case) -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((CHECK / case["inputPath"]).read_text())
    return obj


def argo_health(obj: dict[str, Any]) -> dict[str, str]:
    lua = LuaRuntime(unpack_returned_tuples=True)
    lua.globals().obj = lua.table_from(obj, recursive=True)
    result = lua.execute((CHECK / "health.lua").read_text())
    return {"status": result["status"], "message": result["message"]}


def flux_health(check: dict[str, str], obj: dict[str, Any]) -> str:
    """kstatus verdict of Flux's CEL health check: generation first, then the expressions.

    Flux cannot evaluate an expression that names a field the object lacks (no ``status`` at
    all, before the operator first writes it): it keeps polling, which is InProgress here.
    """
    status = obj.get("status", {})
    observed = status.get("observedGeneration")
    if observed is not None and observed != obj["metadata"]["generation"]:
        return "InProgress"
    env = celpy.Environment()
    activation = {key: json_to_cel(value) for key, value in obj.items()}
    order = (("inProgress", "InProgress"), ("failed", "Failed"), ("current", "Current"))
    for key, verdict in order:
        if key not in check:
            continue
        program = env.program(env.compile(check[key]))
        try:
            if bool(program.evaluate(activation)):
                return verdict
        except CELEvalError:
            return "InProgress"
    return "InProgress"


@pytest.fixture(scope="module")
def flux_check() -> dict[str, str]:
    documents = yaml.safe_load_all((GITOPS / "flux" / "services.yaml").read_text())
    kustomization = next(d for d in documents if d["kind"] == "Kustomization")
    (check,) = kustomization["spec"]["healthCheckExprs"]
    assert (check["apiVersion"], check["kind"]) == (
        "cachefleet.io/v1alpha1",
        "CachedInferenceService",
    )
    return dict(check)


def test_health_test_covers_every_verdict() -> None:
    assert {case["healthStatus"]["status"] for case in cases()} == set(KSTATUS)


@pytest.mark.parametrize("case", cases(), ids=lambda case: Path(case["inputPath"]).stem)
def test_argo_cd_health_check_gives_the_expected_status(case: Case) -> None:
    assert argo_health(load_object(case)) == case["healthStatus"]


@pytest.mark.parametrize("case", cases(), ids=lambda case: Path(case["inputPath"]).stem)
def test_flux_health_check_agrees_with_argo_cd(case: Case, flux_check: dict[str, str]) -> None:
    assert flux_health(flux_check, load_object(case)) == KSTATUS[case["healthStatus"]["status"]]


@pytest.fixture(scope="module")
def crd_schema() -> tuple[str, jsonschema.protocols.Validator]:
    """The CRD's apiVersion and a validator for its schema (the structural part; CEL aside)."""
    crd = yaml.safe_load(CRD.read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]
    validator = jsonschema.validators.validator_for(schema)(schema)
    return f"{crd['spec']['group']}/{version['name']}", validator


@pytest.mark.parametrize("case", cases(), ids=lambda case: Path(case["inputPath"]).stem)
def test_test_objects_are_valid_cached_inference_services(
    case: Case, crd_schema: tuple[str, jsonschema.protocols.Validator]
) -> None:
    api_version, validator = crd_schema
    obj = load_object(case)
    assert obj["apiVersion"] == api_version
    validator.validate(obj)
    # The schema is not all the operator checks (maxmemory within Redis's memory limit, ...):
    # a test object the operator would refuse shows a health no real service reaches.
    render_file(CHECK / case["inputPath"])


def test_argocd_cm_carries_the_tested_script() -> None:
    config_map = yaml.safe_load((GITOPS / "argocd" / "argocd-cm.yaml").read_text())
    key = "resource.customizations.health.cachefleet.io_CachedInferenceService"
    script = config_map["data"][key]
    assert script == (CHECK / "health.lua").read_text()


def operator_status(conditions: list[Condition]) -> dict[str, Any]:
    """A service at generation 2 whose status the operator wrote for that generation."""
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": "simple", "namespace": "inference", "generation": 2},
        "spec": {"model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}},
        "status": {
            "observedGeneration": 2,
            "conditions": render_conditions(conditions, generation=2, previous=None),
        },
    }


REDIS_READY = Condition("RedisReady", True, "Ready", "Redis is ready")
RUNTIME_READY = Condition("RuntimeReady", True, "Ready", "2 of 2 pods ready")
RUNTIME_ROLLING = Condition("RuntimeReady", False, "Progressing", "1 of 2 pods ready")
REFUSED = 'pods are refused: pods "simple-1" is forbidden: violates PodSecurity "restricted"'
RUNTIME_REFUSED = Condition("RuntimeReady", False, "PodsRefused", REFUSED)
REFUSED_CONDITIONS = summary_conditions(
    REDIS_READY, RUNTIME_REFUSED, problem=None, stalled=REFUSED, stalled_reason="PodsRefused"
)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        (summary_conditions(REDIS_READY, RUNTIME_READY, problem=None), "Healthy"),
        (summary_conditions(REDIS_READY, RUNTIME_ROLLING, problem=None), "Progressing"),
        (summary_conditions(REDIS_READY, RUNTIME_READY, problem="apply failed"), "Progressing"),
        (stalled_conditions("set exactly one of model.repository.pvc or .image"), "Degraded"),
        (REFUSED_CONDITIONS, "Degraded"),
    ],
    ids=["ready", "rolling-out", "transient-problem", "invalid-spec", "pods-refused"],
)
def test_health_checks_read_the_conditions_the_operator_writes(
    conditions: list[Condition], expected: str, flux_check: dict[str, str]
) -> None:
    obj = operator_status(conditions)
    assert argo_health(obj)["status"] == expected
    assert flux_health(flux_check, obj) == KSTATUS[expected]


def test_gitops_manifests_point_at_folders_of_this_repository() -> None:
    """Argo CD and Flux read these paths from a clone of this repository; they must exist."""
    paths = []
    for path in sorted(GITOPS.glob("*/*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document["kind"] == "Application":
                paths.append(document["spec"]["source"]["path"])
            elif document["kind"] == "Kustomization":
                paths.append(document["spec"]["path"])
    assert set(paths) == {"./crds", "./deploy", "./examples", "charts/cachefleet", "examples"}
    for path in paths:
        folder = REPO / path
        assert folder.is_dir(), path
        assert list(folder.glob("*.yaml")), f"{path} holds no manifests"
