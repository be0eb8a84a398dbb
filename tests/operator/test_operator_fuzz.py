"""Generated CachedInferenceService specs, valid and invalid, through the operator.

Specs come from strategies derived from the CRD's openAPIV3Schema (every property, its enums,
bounds and patterns), with good and bad quantity strings in every size field, and with targeted
breakages that each expect a message naming what to fix: maxmemory larger than the memory limit,
persistence without a size, autoscaling with minReplicas above maxReplicas or without a CPU
request, both or neither model source, managed-Redis settings beside an external URL, and wrong
types (a spec that is not even an object included). Objects the CRD's schema or
CEL rules would refuse never reach an operator behind a real API server; the emulator does not
validate, so these tests also prove the operator survives them.

- Pure layer (many examples, no emulator): every spec either builds objects that pass the real
  Kubernetes schemas (``kubernetes-validate``, strict), or raises the operator's ``SpecError``
  with a message that names a field; never another exception.
- Running operator (kopf against kmock, fewer examples): every object gets a status for its
  generation; an invalid one is ``Ready=False``/``Stalled=True`` with that message and no
  children, a valid one has every child the builders give; no handler ever fails with an
  exception, and the operator thread stays alive throughout.
"""

from __future__ import annotations

import copy
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, example, find, given, settings
from support.kube.cluster import Cluster
from support.kube.fixtures import (
    CIS_PATH,
    Api,
    OperatorThreads,
    cis,
    condition,
    eventually,
    live,
    service,
)
from support.kube.spec_strategies import Case, breakages, cases, schema_specs, valid_specs
from support.kube.validation import validate_child

from cachefleet.operator.manifests.children import build_children, needs_generated_password
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec

pytest_plugins = ("support.kube.fixtures",)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

OWNER = Owner("fuzz", "ml", "6a1f0c8e-4f7e-4b5e-9d7b-2f0a3c9e8b10")
RESOURCE_OF = {
    "Secret": "v1/secrets",
    "ConfigMap": "v1/configmaps",
    "Service": "v1/services",
    "StatefulSet": "apps/v1/statefulsets",
    "Deployment": "apps/v1/deployments",
    "PodDisruptionBudget": "policy/v1/poddisruptionbudgets",
    "NetworkPolicy": "networking.k8s.io/v1/networkpolicies",
    "HorizontalPodAutoscaler": "autoscaling/v2/horizontalpodautoscalers",
    "ScaledObject": "keda.sh/v1alpha1/scaledobjects",
}

#: Examples of the pure test; the running operator's test takes an eighth (at least 8). The same
#: examples on every run (derandomized); a longer search sets more, for instance
#: ``CACHEFLEET_FUZZ_EXAMPLES=2000 pytest tests/operator/test_operator_fuzz.py``.
EXAMPLES = int(os.environ.get("CACHEFLEET_FUZZ_EXAMPLES", "200"))

# A derandomized profile: the same examples on every run and machine, no example database.
PURE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SEARCH = settings(PURE, max_examples=2000, phases=[Phase.generate])  # found is enough
LIVE = settings(
    PURE,
    max_examples=max(8, EXAMPLES // 8),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        # One emulator and one operator serve every example; each example uses its own name.
        HealthCheck.function_scoped_fixture,
    ],
)

# ---------------------------------------------------------------------------------------------
# The pure layer
# ---------------------------------------------------------------------------------------------

FIELD = re.compile(r"\bspec(\.\w+)*\b|cache\.redis|autoscaling\.|model\.repository|runtime\.")


def render(spec: Any) -> list[dict[str, Any]]:
    parsed = parse_spec(spec)
    password = "generated-password" if needs_generated_password(parsed) else None
    return build_children(parsed, owner=OWNER, redis_password=password, cache_secret="c" * 32)


def outcome(spec: Any) -> list[dict[str, Any]] | SpecError:
    try:
        return render(spec)
    except SpecError as error:
        return error


def check_outcome(case: Case, result: list[dict[str, Any]] | SpecError) -> None:
    if isinstance(result, SpecError):
        message = str(result)
        assert case.says is not None, f"a valid spec was refused: {message}"
        assert message.strip(), "a spec error without a message"
        assert FIELD.search(message), f"the message names no field: {message}"
        assert case.says in message, f"expected {case.says!r} in {message!r}"
        return
    assert not case.says, f"an invalid spec ({case.says!r}) was rendered: {case.spec}"
    assert any(child["kind"] == "Deployment" for child in result)
    for child in result:
        validate_child(child)  # a ScaledObject against KEDA's schema


VALID = {"model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}}


@PURE
@given(cases)
# Found by this test: a spec that is not an object raised TypeError/ValueError, and a bad
# quantity the operator does not parse itself was passed on to fail every apply.
@example(Case("tiered", "spec must be an object"))
@example(Case([VALID], "not a list"))
@example(Case({**VALID, "runtime": {"resources": {"limits": {"memory": "lots"}}}}, "limits.memory"))
@example(Case({**VALID, "runtime": {"resources": {"requests": {"cpu": True}}}}, "requests.cpu"))
@example(
    Case(
        {**VALID, "cache": {"redis": {"persistence": {"mode": "aof", "size": "-1Gi"}}}},
        "spec.cache.redis.persistence.size",
    )
)
def test_every_spec_renders_valid_objects_or_a_spec_error_that_names_the_field(case: Case) -> None:
    check_outcome(case, outcome(copy.deepcopy(case.spec)))


@pytest.mark.parametrize(
    "kind",
    ["maxmemory>limit", "persistence", "min>max", "autoscaling", "both", "no", "external+managed",
     "wrong", "not", "spec", "bad", "tracing", "storageUri"],
)  # fmt: skip
def test_the_strategies_reach_every_breakage(kind: str) -> None:
    """The generators are not stuck on some branches: each breakage can be drawn."""
    found = find(breakages, lambda b: b.name.split(" ")[0] == kind, settings=SEARCH)
    assert found.says


def test_valid_specs_take_the_model_from_storage_too() -> None:
    def from_storage(scheme: str) -> Callable[[dict[str, Any]], bool]:
        return lambda spec: str(spec["model"].get("storageUri", "")).startswith(f"{scheme}://")

    for scheme in ("s3", "gs", "https", "pvc"):
        found = find(valid_specs, from_storage(scheme), settings=SEARCH)
        assert "repository" not in found["model"]


def test_schema_specs_include_valid_and_invalid_ones() -> None:
    assert not isinstance(find(schema_specs, _valid, settings=SEARCH), SpecError)
    find(schema_specs, lambda spec: not _valid(spec), settings=SEARCH)


def _valid(spec: Any) -> bool:
    return not isinstance(outcome(spec), SpecError)


# ---------------------------------------------------------------------------------------------
# The running operator
# ---------------------------------------------------------------------------------------------


class HandlerFailures(logging.Handler):
    """kopf's ERROR records: a handler that raised instead of reporting a condition."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def handler_failures() -> Iterator[HandlerFailures]:
    failures = HandlerFailures()
    logger = logging.getLogger("kopf")
    logger.addHandler(failures)
    yield failures
    logger.removeHandler(failures)


def expected_children(name: str, spec: Any) -> set[tuple[str, str]]:
    owner = Owner(name, OWNER.namespace, OWNER.uid)
    parsed = parse_spec(spec)
    password = "x" if needs_generated_password(parsed) else None
    children = build_children(parsed, owner=owner, redis_password=password, cache_secret="c" * 32)
    return {(RESOURCE_OF[c["kind"]], c["metadata"]["name"]) for c in children}


_numbers = itertools.count()


@LIVE
@given(case=cases)
# Explicit examples run first, in this order: a valid object after one that once broke the handler.
@example(case=Case("tiered", "spec must be an object"))
@example(case=Case(VALID, None))
@pytest.mark.usefixtures("operator")
async def test_the_running_operator_reports_every_generated_object_and_never_fails(
    case: Case,
    cluster: Cluster,
    api: Api,
    operator_threads: OperatorThreads,
    handler_failures: HandlerFailures,
) -> None:
    name = f"fuzz-{next(_numbers)}"
    body = service(name)
    body["spec"] = copy.deepcopy(case.spec)
    result = outcome(copy.deepcopy(case.spec))
    check_outcome(case, result)
    await api.send("POST", CIS_PATH, body)

    def reported() -> dict[str, Any] | None:
        obj = cis(cluster, name)
        status = (obj or {}).get("status") or {}
        ready = condition(obj, "Ready")
        return obj if status.get("observedGeneration") == 1 and ready else None

    obj = await eventually(reported, f"a status on {name}", timeout_s=30)
    ready, stalled = condition(obj, "Ready"), condition(obj, "Stalled")
    assert ready is not None
    assert stalled is not None
    assert ready["status"] == "False"  # no pod ever becomes ready in the emulator
    if isinstance(result, SpecError):
        assert stalled["status"] == "True"
        assert ready["reason"] == "InvalidSpec"
        assert ready["message"] == f"invalid spec: {result}"
        assert live(cluster, "apps/v1/deployments", name) is None
    else:
        assert stalled["status"] == "False"
        assert ready["reason"] == "Progressing"
        assert must_reconciling(obj)
        for resource, child in expected_children(name, case.spec):
            assert live(cluster, resource, child) is not None, f"{resource} {child} is missing"
    assert operator_threads.alive, "the operator thread died"
    assert not handler_failures.records, [r.getMessage() for r in handler_failures.records]


def must_reconciling(obj: dict[str, Any]) -> bool:
    reconciling = condition(obj, "Reconciling")
    return reconciling is not None and reconciling["status"] == "True"
