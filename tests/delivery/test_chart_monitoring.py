"""The chart's monitoring: the operator's metrics port, its Service and ServiceMonitor, and the
PrometheusRule, rendered by the real helm binary. Every alert expression is parsed by Prometheus'
own parser (promtool), and every metric and label it reads is one the code exports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from cachefleet.operator.reconcile.metrics import OperatorMetrics
from cachefleet.runtime.cache import admission_metrics
from cachefleet.runtime.metrics import (
    CacheLookupCounters,
    RequestCounters,
    RuntimeMetrics,
    TritonCounters,
)
from cachefleet.runtime.service import model_info
from delivery.support import HERE, NAMESPACE, RELEASE, Helm, Manifest, find, only, require_tool

KUBERNETES = "1.35"
OPERATOR = f"{RELEASE}-operator"
#: Labels Prometheus adds to every scraped series (the Prometheus Operator's target labels).
TARGET_LABELS = {"namespace", "service", "pod", "job", "instance", "container", "endpoint"}
#: Series Prometheus itself writes for every target (``up``: whether the scrape answered).
PROMETHEUS_SERIES: dict[str, set[str]] = {"up": set()}

# The fields the Prometheus Operator documents for these kinds (monitoring.coreos.com/v1 API
# reference), as far as the chart uses them: a misspelt or misplaced key is silently dropped
# by a real cluster, so it fails here.
SERVICE_MONITOR_SPEC = {"endpoints", "namespaceSelector", "selector", "jobLabel", "targetLabels",
                        "podTargetLabels", "sampleLimit"}  # fmt: skip
ENDPOINT = {"port", "targetPort", "path", "scheme", "interval", "scrapeTimeout", "tlsConfig",
            "honorLabels", "relabelings", "metricRelabelings", "params"}  # fmt: skip
RULE_GROUP = {"name", "interval", "limit", "labels", "partial_response_strategy", "query_offset",
              "rules"}  # fmt: skip
ALERTING_RULE = {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}


@pytest.fixture(scope="module")
def objects(helm: Helm) -> list[Manifest]:
    return helm.template(HERE / "values-monitoring.yaml")


def exported() -> dict[str, set[str]]:
    """Every series name the runtime and the operator export, with its label names: each
    metric given one child, as a scrape after some traffic shows it."""
    series: dict[str, set[str]] = {k: set(v) for k, v in PROMETHEUS_SERIES.items()}
    runtime, operator = RuntimeMetrics(), OperatorMetrics()
    for metrics in (runtime, operator):
        for value in vars(metrics).values():
            if isinstance(value, MetricWrapperBase) and value._labelnames:
                value.labels(*["x"] * len(value._labelnames))
            elif isinstance(value, TritonCounters):
                for name in value.NAMES:
                    value.add(name, "m", "1")
            elif isinstance(value, CacheLookupCounters):
                value.hits("m", "1", "local").inc()
                value.lookup("m", "1", "local").observe(0.001)
            elif isinstance(value, RequestCounters):
                with value.lock:
                    for code in ("200", "503"):  # Triton's success and failure read these
                        value.of("m", "1").answered(code, 0.001)
        operator.readiness.observe("ns", "svc", False, "Progressing")
        for family in metrics.registry.collect():
            for sample in family.samples:
                series.setdefault(sample.name, set()).update(sample.labels)
    series[model_info.NAME] = {"model", "version", "fingerprint"}
    for name, (_, labels, _) in admission_metrics.GAUGES.items():
        series[name] = set(labels)
    return series


#: Label lists of grouping and matching clauses: names of labels, not of series.
CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?")
KEYWORDS = {"and", "or", "unless", "offset", "bool", "inf", "nan", "by", "without", "on",
            "ignoring", "group_left", "group_right"}  # fmt: skip


def selectors(expr: str) -> list[tuple[str, set[str]]]:
    """The series an expression reads, each with the label names its matchers use."""
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)  # label values may hold anything
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = CLAUSE.sub("", text)
    found = []
    for match in SELECTOR.finditer(text):
        name, matchers = match.group(1), match.group(2) or ""
        rest = text[match.end() :].lstrip()
        if name in KEYWORDS or (rest.startswith("(") and not matchers):
            continue  # a function or an aggregation
        if re.fullmatch(r"[0-9].*", name) or (match.start() and text[match.start() - 1].isdigit()):
            continue  # a number or a duration (1h, 5m)
        labels = set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
        found.append((name, labels))
    return found


def test_the_operator_pod_serves_metrics_on_the_chart_port(objects: list[Manifest]) -> None:
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--metrics-port=9102" in container["args"]
    assert {"name": "metrics", "containerPort": 9102, "protocol": "TCP"} in container["ports"]


def test_the_operator_service_monitor_scrapes_the_operator_pods(objects: list[Manifest]) -> None:
    service = only(objects, "Service", f"{OPERATOR}-metrics")
    kubernetes_validate.validate(service, KUBERNETES, strict=True)
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 9102, "targetPort": "metrics", "protocol": "TCP"}
    ]
    monitors = {m["metadata"]["name"]: m for m in find(objects, "ServiceMonitor")}
    monitor = monitors[OPERATOR]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    assert set(spec) <= SERVICE_MONITOR_SPEC
    assert spec["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    # It selects the operator's metrics Service, and only it (not the runtime Services).
    selected = spec["selector"]["matchLabels"].items()
    assert selected <= service["metadata"]["labels"].items()
    runtime_monitor = next(m for name, m in monitors.items() if name != OPERATOR)
    assert not selected <= runtime_monitor["spec"]["selector"]["matchLabels"].items()
    for endpoint in spec["endpoints"]:
        assert set(endpoint) <= ENDPOINT
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["path"] == "/metrics"
        # The services' own namespace and service labels are kept, not renamed exported_*.
        assert endpoint["honorLabels"] is True


def test_the_prometheus_rule_has_the_documented_shape(objects: list[Manifest]) -> None:
    rule = only(objects, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["namespace"] == NAMESPACE
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert set(rule["spec"]) == {"groups"}
    alerts = set()
    for group in rule["spec"]["groups"]:
        assert set(group) <= RULE_GROUP
        assert group["name"]
        assert group["rules"]
        for alert in group["rules"]:
            assert set(alert) <= ALERTING_RULE
            assert alert["labels"]["severity"] in {"warning", "critical"}
            assert alert["labels"]["team"] == "ml-platform"
            assert alert["annotations"]["summary"]
            alerts.add(alert["alert"])
    # What the operator and the runtime promise an SRE: one alert each.
    assert {
        "CachefleetServiceNotReady", "CachefleetRedisDown", "CachefleetCacheHitRatioCollapse",
        "CachefleetRedisCircuitOpen", "CachefleetModelDownloadFailing",
        "CachefleetOperatorNotReconciling", "CachefleetOperatorErrorsRising",
        "CachefleetOperatorNoLeader", "CachefleetUpstreamUnavailable", "CachefleetTritonDown",
        "CachefleetTritonInferenceFailures", "CachefleetUpstreamCircuitOpen",
    } <= alerts  # fmt: skip


def test_prometheus_parses_every_rule(objects: list[Manifest], tmp_path: Path) -> None:
    promtool = require_tool("promtool", "install Debian's prometheus package (scripts/setup-dev)")
    groups = only(objects, "PrometheusRule")["spec"]["groups"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run([promtool, "check", "rules", str(rules)],
                            capture_output=True, text=True, check=False, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in groups)
    assert f"SUCCESS: {count} rules found" in result.stdout


#: A fleet in front of Triton, over 20 minutes at one-minute scrapes: requests (cumulative
#: counters, 100 a minute), and what Triton's metrics endpoint says.
FLEET = 'namespace="ml",service="svc",pod="svc-7d9f8-x2b4c"'
TRITON = f'{FLEET},endpoint="triton-metrics"'


def promtool_test(
    tmp_path: Path,
    groups: list[Any],
    series: list[dict[str, str]],
    alerts: dict[str, list[dict[str, str]]],
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules``: the alerts firing at minute 20 of ``series`` must be exactly
    ``alerts`` (each name's alerts by their labels; [] for none)."""
    promtool = require_tool("promtool", "install Debian's prometheus package (scripts/setup-dev)")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    checks = [{"eval_time": "20m", "alertname": name,
               "exp_alerts": [{"exp_labels": labels} for labels in fired]}
              for name, fired in alerts.items()]  # fmt: skip
    case = {"interval": "1m", "input_series": series, "alert_rule_test": checks}
    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [case]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    return subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp_path,
                          capture_output=True, text=True, check=False, timeout=60)  # fmt: skip


def upstream_groups(objects: list[Manifest]) -> list[Any]:
    """The upstream alerts without their annotations (promtool would match their text too:
    what is tested here is when they fire, and with which labels)."""
    groups = only(objects, "PrometheusRule")["spec"]["groups"]
    [group] = [g for g in groups if g["name"] == "cachefleet-upstream"]
    rules = [{k: v for k, v in rule.items() if k != "annotations"} for rule in group["rules"]]
    return [{**group, "rules": rules}]


def test_the_upstream_alerts_fire_on_an_unreachable_upstream_and_a_failing_triton(
    objects: list[Manifest], tmp_path: Path
) -> None:
    # Half of the requests answered 503 (the upstream behind its breaker), Triton's port silent,
    # Triton failing a tenth of what it is sent, and the pod's breaker open all along.
    down = [
        {"series": f'cachefleet_requests_total{{{FLEET},model="m",version="1",code="200"}}',
         "values": "0+50x20"},
        {"series": f'cachefleet_requests_total{{{FLEET},model="m",version="1",code="503"}}',
         "values": "0+50x20"},
        {"series": f"up{{{TRITON}}}", "values": "0x20"},
        {"series": f'nv_inference_request_success{{{TRITON},model="m",version="1"}}',
         "values": "0+90x20"},
        {"series": f'nv_inference_request_failure{{{TRITON},model="m",version="1"}}',
         "values": "0+10x20"},
        {"series": f"cachefleet_upstream_circuit_open{{{FLEET}}}", "values": "1x20"},
    ]  # fmt: skip
    team = {"team": "ml-platform"}  # the chart's alertLabels in these values
    fleet = {"namespace": "ml", "service": "svc", **team}
    fired = {
        "CachefleetUpstreamUnavailable": [{**fleet, "severity": "critical"}],
        "CachefleetTritonDown": [{**fleet, "severity": "critical", "pod": "svc-7d9f8-x2b4c",
                                  "endpoint": "triton-metrics"}],
        "CachefleetTritonInferenceFailures": [{**fleet, "severity": "warning"}],
        "CachefleetUpstreamCircuitOpen": [{**fleet, "severity": "warning",
                                           "pod": "svc-7d9f8-x2b4c"}],
    }  # fmt: skip
    result = promtool_test(tmp_path, upstream_groups(objects), down, fired)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_upstream_alerts_stay_quiet_on_a_healthy_fleet(
    objects: list[Manifest], tmp_path: Path
) -> None:
    healthy = [
        {"series": f'cachefleet_requests_total{{{FLEET},model="m",version="1",code="200"}}',
         "values": "0+100x20"},
        {"series": f'cachefleet_requests_total{{{FLEET},model="m",version="1",code="503"}}',
         "values": "0+1x20"},
        {"series": f"up{{{TRITON}}}", "values": "1x20"},
        {"series": f'nv_inference_request_success{{{TRITON},model="m",version="1"}}',
         "values": "0+100x20"},
        {"series": f'nv_inference_request_failure{{{TRITON},model="m",version="1"}}',
         "values": "0+1x20"},
        # The breaker open for the last 4 minutes only: a short outage does not page.
        {"series": f"cachefleet_upstream_circuit_open{{{FLEET}}}", "values": "0x15 1x4"},
    ]  # fmt: skip
    quiet: dict[str, list[dict[str, str]]] = {"CachefleetUpstreamUnavailable": [],
                                              "CachefleetTritonDown": [],
                                              "CachefleetTritonInferenceFailures": [],
                                              "CachefleetUpstreamCircuitOpen": []}  # fmt: skip
    result = promtool_test(tmp_path, upstream_groups(objects), healthy, quiet)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_reads_series_and_labels_the_code_exports(objects: list[Manifest]) -> None:
    series = exported()
    read: list[tuple[str, set[str]]] = []
    for group in only(objects, "PrometheusRule")["spec"]["groups"]:
        for alert in group["rules"]:
            found = selectors(str(alert["expr"]))
            assert found, alert["alert"]
            read += found
            for name, labels in found:
                assert name in series, f"{alert['alert']} reads {name}, which nothing exports"
                unknown = labels - series[name] - TARGET_LABELS
                assert not unknown, f"{alert['alert']}: {name} has no label {unknown}"
    names = {name for name, _ in read}
    assert "cachefleet_operator_service_not_ready" in names
    assert "cachefleet_redis_circuit_open" in names
    assert "cachefleet_upstream_circuit_open" in names


@pytest.mark.parametrize(
    ("expr", "wanted"),
    [
        ('sum by (namespace) (rate(a_total{tier="x", kind=~"y|z"}[5m])) > 1',
         [("a_total", {"tier", "kind"})]),
        ("time() - max(b{pass=\"resync\"}) > 1200", [("b", {"pass"})]),
        ("c / on (pod) group_left d offset 1h and e > bool 0", [("c", set()), ("d", set()),
                                                                ("e", set())]),
        ("absent(f) or sum(f) < 1", [("f", set()), ("f", set())]),
    ],
)  # fmt: skip
def test_selectors_finds_the_series_an_expression_reads(
    expr: str, wanted: list[tuple[str, set[str]]]
) -> None:
    assert selectors(expr) == wanted


def test_monitoring_is_off_by_default(default_objects: list[Manifest]) -> None:
    kinds = {obj["kind"] for obj in default_objects}
    assert "PrometheusRule" not in kinds
    assert not list(find(default_objects, "Service", f"{OPERATOR}-metrics"))
    # The port is there all the same, for a Prometheus that scrapes pods by annotation.
    pod = only(default_objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert "--metrics-port=8081" in pod["containers"][0]["args"]
