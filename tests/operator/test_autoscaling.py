"""Autoscaling on what the cache leaves: the scaler each spec renders (an HPA on CPU or on Pods
metrics, or a KEDA ScaledObject reading Prometheus), the PromQL it carries, and the rules of the
spec, which the operator's model and the CRD's CEL state alike."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.kube.crd_schema import apply_defaults, cel_failures, schema, to_json_schema
from support.kube.keda import admission_problems
from support.kube.validation import validate_child

from cachefleet.operator.manifests import promql
from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.runtime.metrics import RuntimeMetrics

OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"
BASE: dict[str, Any] = {
    "replicas": 2,
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
    "cache": {"mode": "local"},
    "runtime": {"resources": {"requests": {"cpu": "1"}}},
}
PODS = "svc-[bcdfghjklmnpqrstvwxz2456789]{1,10}-[bcdfghjklmnpqrstvwxz2456789]{5}"
MISSES_QUERY = f'sum(rate(cachefleet_cache_misses_total{{namespace="ml",pod=~"{PODS}"}}[2m]))'
QUEUE_QUERY = f'sum(cachefleet_queue_pending{{namespace="ml",pod=~"{PODS}"}})'
FORWARDED_QUERY = (
    f'sum(rate(cachefleet_inference_seconds_count{{namespace="ml",pod=~"{PODS}"}}[2m]))'
)
TRITON_SERVER = {"kind": "triton", "image": "nvcr.io/nvidia/tritonserver:24.08-py3", "gpus": 1}
EXTERNAL_SERVER = {"kind": "external", "url": "grpc://triton.ml.svc:8001"}
INGRESS_RATE = (
    'sum(rate(nginx_ingress_controller_requests{exported_namespace="ml",exported_service="svc"}'
    "[2m]))"
)


def render(autoscaling: dict[str, Any], **spec: Any) -> list[dict[str, Any]]:
    body = {**copy.deepcopy(BASE), **spec, "autoscaling": autoscaling}
    children = build_children(parse_spec(body), owner=OWNER)
    for child in children:
        validate_child(child)
    return children


def only(children: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == kind]
    return found


def scaler_kinds(children: list[dict[str, Any]]) -> list[str]:
    return [c["kind"] for c in children if c["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")]


def keda(metric: str, **extra: Any) -> dict[str, Any]:
    return {
        "maxReplicas": 8,
        "metric": metric,
        "engine": "keda",
        "prometheus": {"serverAddress": PROMETHEUS},
        **extra,
    }


# --- the HPA ------------------------------------------------------------------------------


def test_autoscaling_as_before_is_an_hpa_on_cpu() -> None:
    children = render({"minReplicas": 2, "maxReplicas": 10, "targetCPUUtilizationPercentage": 60})
    assert scaler_kinds(children) == ["HorizontalPodAutoscaler"]
    hpa = only(children, "HorizontalPodAutoscaler")["spec"]
    target = {"type": "Utilization", "averageUtilization": 60}
    assert hpa["metrics"] == [{"type": "Resource", "resource": {"name": "cpu", "target": target}}]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 10)
    assert "replicas" not in only(children, "Deployment")["spec"]


@pytest.mark.parametrize(
    ("metric", "target", "name", "average"),
    [
        ("misses", 12, "cachefleet_cache_misses_per_second", "12"),
        ("queue", 0.5, "cachefleet_queue_pending", "500m"),
        ("queue", 2.25, "cachefleet_queue_pending", "2250m"),
    ],
)
def test_an_hpa_scales_on_the_pods_metric_a_metrics_adapter_serves(
    metric: str, target: float, name: str, average: str
) -> None:
    children = render({"maxReplicas": 6, "metric": metric, "target": target})
    hpa = only(children, "HorizontalPodAutoscaler")["spec"]
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"}
    assert hpa["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": name},
                "target": {"type": "AverageValue", "averageValue": average},
            },
        }
    ]


def test_pods_metrics_need_no_cpu_request() -> None:
    spec = {**copy.deepcopy(BASE), "runtime": {}}
    spec["autoscaling"] = {"maxReplicas": 4, "metric": "misses", "target": 5}
    assert parse_spec(spec).autoscaling is not None
    assert cel_failures(_cis(spec)) == []


# --- KEDA ---------------------------------------------------------------------------------


def test_keda_scales_on_the_fleets_miss_rate_per_pod() -> None:
    children = render(keda("misses", minReplicas=1, target=20))
    assert scaler_kinds(children) == ["ScaledObject"]
    scaled = only(children, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["metadata"]["ownerReferences"][0]["uid"] == OWNER.uid
    # KEDA's own HPA does not carry the operator's managed-by label (KEDA copies the others).
    excluded = scaled["metadata"]["annotations"]["scaledobject.keda.sh/hpa-excluded-labels"]
    assert excluded == "app.kubernetes.io/managed-by"
    assert scaled["spec"] == {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "svc"},
        "minReplicaCount": 1,
        "maxReplicaCount": 8,
        "triggers": [
            {
                "type": "prometheus",
                "name": "misses",
                "metadata": {"serverAddress": PROMETHEUS, "query": MISSES_QUERY, "threshold": "20"},
            }
        ],
    }
    assert "replicas" not in only(children, "Deployment")["spec"]


def test_keda_scales_on_pending_requests_per_pod() -> None:
    scaled = only(render(keda("queue", target=2.5)), "ScaledObject")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["metadata"] == {
        "serverAddress": PROMETHEUS,
        "query": QUEUE_QUERY,
        "threshold": "2.5",
    }


def test_keda_on_cpu_is_a_cpu_trigger_with_a_minimum_keda_accepts() -> None:
    scaled = only(render({"maxReplicas": 3, "engine": "keda"}), "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == 1  # KEDA refuses cpu-only triggers without it
    assert scaled["spec"]["triggers"] == [
        {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "70"}}
    ]


def test_a_query_override_replaces_the_rendered_query() -> None:
    mine = 'sum(rate(cachefleet_cache_misses_total{job="cachefleet",namespace="ml"}[5m]))'
    scaling = keda("misses", target=4, prometheus={"serverAddress": PROMETHEUS, "query": mine})
    [trigger] = only(render(scaling), "ScaledObject")["spec"]["triggers"]
    assert trigger["metadata"]["query"] == mine


@pytest.mark.parametrize("metric", ["misses", "cpu"])
def test_scale_to_zero_wakes_on_the_request_rate_in_front_of_the_pods(metric: str) -> None:
    prometheus = {
        "serverAddress": PROMETHEUS,
        "activationQuery": INGRESS_RATE,
        "activationThreshold": 0.5,
    }
    target = {"target": 10} if metric == "misses" else {}
    scaling = keda(metric, minReplicas=0, prometheus=prometheus, **target)
    scaled = only(render(scaling), "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == 0
    activation = scaled["spec"]["triggers"][-1]
    assert activation == {
        "type": "prometheus",
        "name": "activation",
        "metadata": {
            "serverAddress": PROMETHEUS,
            "query": INGRESS_RATE,
            # Only wakes the fleet: never asks for a second pod (misses or CPU scale it).
            "threshold": "1000000",
            "activationThreshold": "0.5",
        },
    }
    assert len(scaled["spec"]["triggers"]) == 2


def test_the_keda_checks_catch_what_keda_refuses() -> None:
    """The stand-in for KEDA's admission says no where KEDA does (so its yes means something)."""
    scaled = only(render({"maxReplicas": 3, "engine": "keda"}), "ScaledObject")
    cpu_only_from_zero = copy.deepcopy(scaled)
    cpu_only_from_zero["spec"]["minReplicaCount"] = 0
    assert admission_problems(cpu_only_from_zero)
    bad_threshold = only(render(keda("misses", target=3)), "ScaledObject")
    bad_threshold["spec"]["triggers"][0]["metadata"]["threshold"] = "3 per second"
    assert admission_problems(bad_threshold)
    unknown_field = copy.deepcopy(scaled)
    unknown_field["spec"]["minReplicas"] = 1
    with pytest.raises(jsonschema.ValidationError):
        validate_child(unknown_field)


# --- the PromQL ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "series"),
    [
        (promql.misses_per_second(OWNER), "cachefleet_cache_misses_total"),
        (promql.pending_requests(OWNER), "cachefleet_queue_pending"),
        (promql.forwarded_per_second(OWNER), "cachefleet_inference_seconds_count"),
    ],
)
def test_the_promql_parses_and_selects_the_fleets_runtime_pods_only(
    query: str, series: str
) -> None:
    expression = promql_parser.parse(query)
    assert isinstance(expression, promql_parser.AggregateExpr)
    assert str(expression.op) == "sum"
    assert not expression.modifier, "summed over the whole fleet, not by pod"
    inner = expression.expr
    if isinstance(inner, promql_parser.Call):
        assert inner.func.name == "rate"
        [matrix] = inner.args
        assert isinstance(matrix, promql_parser.MatrixSelector)
        assert str(matrix.range) in ("0:02:00", "2m")
        inner = matrix.vector_selector
    assert isinstance(inner, promql_parser.VectorSelector)
    assert inner.name == series
    matchers = {m.name: (str(m.op), m.value) for m in inner.matchers.matchers}
    assert matchers["namespace"] == ("MatchOp.Equal", "ml")
    op, pattern = matchers["pod"]
    assert op == "MatchOp.Re"
    # Prometheus anchors the pattern at both ends: fullmatch is what it does.
    for pod in ("svc-7d9c8b6f5-x2x4q", "svc-5f7b9d4c8d-qz7kb"):
        assert re.fullmatch(pattern, pod), pod
    others = ("svc-redis-0", "svc-other-7d9c8b6f5-x2x4q", "svc-bg-7d9c8b6f5-x2x4q",
              "svc2-7d9c8b6f5-x2x4q", "my-svc-6f-x2x4q")  # fmt: skip
    for pod in others:
        assert not re.fullmatch(pattern, pod), pod


def test_the_runtime_exports_the_series_the_queries_read() -> None:
    metrics = RuntimeMetrics()
    metrics.cache_misses.labels("simple", "1").inc()
    metrics.requests.of("simple", "1").pending += 1
    text = generate_latest(metrics.registry).decode()
    samples = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
    assert {promql.MISSES_SERIES, promql.PENDING_SERIES} <= samples


# --- the rules of the spec ------------------------------------------------------------------


INVALID: dict[str, tuple[dict[str, Any], str]] = {
    "zero without keda": (
        {"minReplicas": 0, "maxReplicas": 3},
        "autoscaling.minReplicas 0 needs autoscaling.engine keda",
    ),
    "keda misses without prometheus": (
        {"maxReplicas": 3, "engine": "keda", "metric": "misses", "target": 5},
        "needs autoscaling.prometheus.serverAddress",
    ),
    "misses without target": (
        {"maxReplicas": 3, "metric": "misses"},
        "autoscaling.metric misses, queue or forwarded needs autoscaling.target",
    ),
    "cpu with target": (
        {"maxReplicas": 3, "target": 5},
        "autoscaling.target is for metric misses, queue or forwarded",
    ),
    "prometheus with hpa": (
        {"maxReplicas": 3, "metric": "queue", "target": 2, "prometheus": {"serverAddress": "x"}},
        "autoscaling.prometheus is read by engine keda only",
    ),
    "zero without activation": (
        {"minReplicas": 0, **keda("misses", target=5)},
        "autoscaling.minReplicas 0 needs autoscaling.prometheus.activationQuery",
    ),
    "min above max": (
        {"minReplicas": 4, "maxReplicas": 3},
        "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
    ),
}
FORWARDED = {"maxReplicas": 4, "metric": "forwarded", "target": 30}


def _cis(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": "svc"},
        "spec": spec,
    }


@pytest.mark.parametrize("case", INVALID, ids=str)
def test_the_model_and_the_crd_refuse_the_same_autoscaling(case: str) -> None:
    scaling, message = INVALID[case]
    spec = {**copy.deepcopy(BASE), "autoscaling": copy.deepcopy(scaling)}
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec(spec)
    failures = cel_failures(_cis(spec))
    assert any(message in failure for failure in failures), failures


@pytest.mark.parametrize("server", [None, EXTERNAL_SERVER], ids=["no server", "external"])
def test_forwarded_load_is_refused_without_a_triton_of_the_pods_own(
    server: dict[str, Any] | None,
) -> None:
    spec = {**copy.deepcopy(BASE), "autoscaling": dict(FORWARDED)}
    if server is not None:
        spec["server"] = dict(server)
        del spec["model"]["repository"]
    message = "autoscaling.metric forwarded needs server kind triton"
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)
    assert any(message in failure for failure in cel_failures(_cis(spec)))


def test_a_triton_fleet_scales_on_the_calls_that_reach_its_tritons() -> None:
    """What reaches Triton is the cache's misses and bypasses, merged into batches: a fleet
    answering mostly hits keeps few pods (and GPUs), whatever its request rate."""
    scaled = only(render(keda("forwarded", target=30), server=TRITON_SERVER), "ScaledObject")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger == {
        "type": "prometheus",
        "name": "forwarded",
        "metadata": {"serverAddress": PROMETHEUS, "query": FORWARDED_QUERY, "threshold": "30"},
    }
    hpa = only(render(dict(FORWARDED), server=TRITON_SERVER), "HorizontalPodAutoscaler")
    [metric] = hpa["spec"]["metrics"]
    assert metric["pods"]["metric"] == {"name": "cachefleet_forwarded_per_second"}
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "30"}
    spec = {**copy.deepcopy(BASE), "server": TRITON_SERVER, "autoscaling": dict(FORWARDED)}
    assert cel_failures(_cis(spec)) == []


def test_the_forwarded_series_counts_the_upstream_calls_and_only_cachefleets() -> None:
    """One count per execution: in front of a server, per forwarded call. It is cachefleet's
    own name, so a scrape of the pod's Triton (nv_* only) never adds to it."""
    metrics = RuntimeMetrics()
    metrics.inference_seconds.labels("densenet_onnx", "1").observe(0.02)
    metrics.inference_seconds.labels("densenet_onnx", "1").observe(0.03)
    text = generate_latest(metrics.registry).decode()
    [count] = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == promql.FORWARDED_SERIES]  # fmt: skip
    assert count.value == 2
    assert not promql.FORWARDED_SERIES.startswith("nv_")


def test_pending_requests_need_one_worker_per_pod() -> None:
    """Each worker has its own registry and a scrape reads one: the sum would be a guess."""
    spec = {**copy.deepcopy(BASE), "runtime": {"workers": 2}}
    spec["autoscaling"] = {"maxReplicas": 3, "metric": "queue", "target": 2}
    message = "needs runtime.workers 1"
    with pytest.raises(SpecError, match=message):
        parse_spec(spec)
    assert any(message in failure for failure in cel_failures(_cis(spec)))


VALID = {
    "keda misses": keda("misses", target=20),
    "keda queue from zero": keda(
        "queue",
        minReplicas=0,
        target=4,
        prometheus={"serverAddress": PROMETHEUS, "activationQuery": INGRESS_RATE},
    ),
    "hpa misses": {"maxReplicas": 5, "metric": "misses", "target": 0.25},
    "keda cpu": {"maxReplicas": 5, "engine": "keda"},
}


@pytest.mark.parametrize("case", VALID, ids=str)
def test_the_model_and_the_crd_accept_the_same_autoscaling(case: str) -> None:
    spec = {**copy.deepcopy(BASE), "autoscaling": copy.deepcopy(VALID[case])}
    parse_spec(spec)
    obj = _cis(spec)
    assert cel_failures(obj) == []
    jsonschema.validate(apply_defaults(schema(), obj), to_json_schema(schema()))


# --- the guide says what the operator does ------------------------------------------------

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "autoscaling.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", GUIDE.read_text(), flags=re.DOTALL)


def test_the_guide_shows_the_promql_the_operator_renders() -> None:
    owner = Owner("densenet", "inference", "uid")
    [shown] = _blocks("promql")
    queries = [line for line in shown.splitlines() if line and not line.startswith("#")]
    assert queries == [
        promql.misses_per_second(owner),
        promql.pending_requests(owner),
        promql.forwarded_per_second(owner),
    ]


def test_the_guides_adapter_rules_serve_the_metrics_the_hpa_asks_for() -> None:
    [rules] = [yaml.safe_load(b)["rules"] for b in _blocks("yaml") if "seriesQuery" in b]
    assert sorted(rule["name"]["as"] for rule in rules) == sorted(promql.ADAPTER_METRICS.values())
    for rule in rules:
        series = re.match(r"(\w+)\{", rule["seriesQuery"])
        assert series is not None
        assert re.fullmatch(rule["name"]["matches"], series.group(1))
        assert series.group(1) in (
            promql.MISSES_SERIES,
            promql.PENDING_SERIES,
            promql.FORWARDED_SERIES,
        )
        # The adapter's template, filled as it fills it, is PromQL.
        filled = (
            rule["metricsQuery"]
            .replace("<<.Series>>", series.group(1))
            .replace("<<.LabelMatchers>>", 'namespace="ml",pod=~"svc-.*"')
            .replace("<<.GroupBy>>", "pod")
        )
        promql_parser.parse(filled)
