"""``spec.runtime.tracing``: the standard OTEL_* variables on the runtime container, read back
the way the runtime and the OpenTelemetry SDK read them, with no secret in the pod template."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from opentelemetry.sdk.resources import OTELResourceDetector
from opentelemetry.sdk.trace.sampling import _get_from_env_or_default
from support.kube.crd_schema import EXAMPLES

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.runtime.tracing.switch import exporter_asked

OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
BASE: dict[str, Any] = {
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
    "cache": {"mode": "local"},
}
TRACING = {
    "endpoint": "http://otel-collector.observability:4318",
    "sampler": "parentbased_traceidratio",
    "ratio": 0.25,
    "resourceAttributes": {"deployment.environment.name": "staging, eu=1 $(X)"},
    "headersSecretRef": {"name": "otlp-headers"},
}


def server_container(tracing: dict[str, Any] | None) -> dict[str, Any]:
    spec = copy.deepcopy(BASE)
    if tracing is not None:
        spec["runtime"] = {"tracing": copy.deepcopy(tracing)}
    children = build_children(
        parse_spec(spec), owner=OWNER, redis_password=None, cache_secret="generated"
    )
    (deployment,) = [c for c in children if c["kind"] == "Deployment"]
    kubernetes_validate.validate(deployment, "1.32", strict=True)
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    (server,) = [c for c in containers if c["name"] == "server"]
    return server


def as_environment(env: list[dict[str, Any]], secrets: dict[str, str]) -> dict[str, str]:
    """The variables as the pod sees them: Secret references resolved, ``$(VAR)`` expanded
    from the variables before, downward-API fields filled in."""
    seen: dict[str, str] = {}
    for variable in env:
        if "value" in variable:
            value = re.sub(r"\$\((\w+)\)", lambda m: seen.get(m[1], m[0]), variable["value"])
        elif "secretKeyRef" in variable["valueFrom"]:
            ref = variable["valueFrom"]["secretKeyRef"]
            value = secrets[f"{ref['name']}/{ref['key']}"]
        else:
            assert variable["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
            value = "svc-6d9f-x2k"
        seen[variable["name"]] = value
    return seen


def test_without_tracing_the_pods_get_no_otel_variable() -> None:
    env = server_container(None)["env"]
    assert not [v for v in env if v["name"].startswith("OTEL_")]
    assert exporter_asked(as_environment(env, {"svc-fleet/admin-token": "t"})) is None


def test_tracing_becomes_the_standard_variables_the_runtime_and_sdk_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = server_container(TRACING)["env"]
    secrets = {"otlp-headers/headers": "x-api-key=very-secret", "svc-fleet/admin-token": "t"}
    environment = as_environment(env, secrets)
    assert exporter_asked(environment) == "otlp"
    assert environment["OTEL_EXPORTER_OTLP_ENDPOINT"] == TRACING["endpoint"]
    assert environment["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf"
    assert environment["OTEL_EXPORTER_OTLP_HEADERS"] == "x-api-key=very-secret"
    assert environment["OTEL_SERVICE_NAME"] == "svc"  # the service's name by default
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    sampler = _get_from_env_or_default()
    assert "TraceIdRatioBased{0.25}" in sampler.get_description()
    resource = OTELResourceDetector().detect().attributes
    assert resource["k8s.namespace.name"] == "ml"
    assert resource["k8s.deployment.name"] == "svc"
    assert resource["k8s.pod.name"] == "svc-6d9f-x2k"
    assert resource["deployment.environment.name"] == "staging, eu=1 $(X)"


def test_the_collector_headers_stay_in_their_secret() -> None:
    server = server_container(TRACING)
    (headers,) = [v for v in server["env"] if v["name"] == "OTEL_EXPORTER_OTLP_HEADERS"]
    assert headers == {
        "name": "OTEL_EXPORTER_OTLP_HEADERS",
        "valueFrom": {"secretKeyRef": {"name": "otlp-headers", "key": "headers"}},
    }
    assert "very-secret" not in yaml.safe_dump(server)


def test_a_service_name_and_an_always_on_sampler_are_passed_as_given() -> None:
    tracing = {"endpoint": "https://otel:4318", "sampler": "always_on", "serviceName": "vision"}
    environment = as_environment(server_container(tracing)["env"], {"svc-fleet/admin-token": "t"})
    assert environment["OTEL_SERVICE_NAME"] == "vision"
    assert environment["OTEL_TRACES_SAMPLER"] == "always_on"
    assert "OTEL_TRACES_SAMPLER_ARG" not in environment
    assert "OTEL_EXPORTER_OTLP_HEADERS" not in environment


@pytest.mark.parametrize(
    ("tracing", "message"),
    [
        ({"endpoint": "otel:4318"}, "spec.runtime.tracing.endpoint"),
        ({"endpoint": "http://o:4318", "ratio": 0.5}, "ratio is read only by the samplers"),
        ({"endpoint": "http://o:4318", "resourceAttributes": {"a=b": "c"}}, "keys"),
    ],
)
def test_a_bad_tracing_spec_is_refused_with_the_field(
    tracing: dict[str, Any], message: str
) -> None:
    with pytest.raises(SpecError, match=re.escape(message)):
        parse_spec({**BASE, "runtime": {"tracing": tracing}})


def test_the_tracing_example_traces() -> None:
    (path,) = [p for p in EXAMPLES if p.stem == "tracing"]
    spec = parse_spec(yaml.safe_load(path.read_text())["spec"])
    assert spec.runtime.tracing is not None
    assert spec.runtime.tracing.endpoint.startswith("http")
