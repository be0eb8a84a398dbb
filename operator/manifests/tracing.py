"""``spec.runtime.tracing`` as the standard OpenTelemetry variables of the runtime container.

The runtime reads nothing else to trace (see ``cachefleet.runtime.tracing``), so any OTLP
collector works and the pods follow the OpenTelemetry documentation. The collector's headers
(an API key, say) come from a Secret by reference: the pod template never holds them. The
resource names the pod (``k8s.pod.name`` through the downward API, put in by Kubernetes'
``$(VAR)`` expansion), its namespace and its Deployment; the user's attributes come last and win.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import Tracing

POD_NAME_ENV = "CACHEFLEET_POD_NAME"


def tracing_env(tracing: Tracing | None, *, owner: Owner) -> list[dict[str, Any]]:
    """The container's tracing variables (none when tracing is off)."""
    if tracing is None:
        return []
    env: list[dict[str, Any]] = [
        {"name": "OTEL_TRACES_EXPORTER", "value": "otlp"},
        {"name": "OTEL_EXPORTER_OTLP_PROTOCOL", "value": "http/protobuf"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": tracing.endpoint},
    ]
    if tracing.headers_secret_ref is not None:
        ref = tracing.headers_secret_ref
        env.append(
            {
                "name": "OTEL_EXPORTER_OTLP_HEADERS",
                "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}},
            }
        )
    env.append({"name": "OTEL_SERVICE_NAME", "value": tracing.service_name or owner.name})
    env.append({"name": "OTEL_TRACES_SAMPLER", "value": tracing.sampler})
    if tracing.ratio is not None:
        env.append({"name": "OTEL_TRACES_SAMPLER_ARG", "value": repr(tracing.ratio)})
    env.append({"name": POD_NAME_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    env.append({"name": "OTEL_RESOURCE_ATTRIBUTES", "value": _resource(tracing, owner)})
    return env


def _resource(tracing: Tracing, owner: Owner) -> str:
    """``key=value,...`` with values percent-encoded (as the variable's syntax asks, and so that
    a ``$`` never reaches Kubernetes' expansion); only the pod name is expanded."""
    attributes = {
        "k8s.namespace.name": _encoded(owner.namespace),
        "k8s.deployment.name": _encoded(owner.name),
        "k8s.pod.name": f"$({POD_NAME_ENV})",
    }
    attributes.update({k: _encoded(v) for k, v in tracing.resource_attributes.items()})
    return ",".join(f"{key}={value}" for key, value in attributes.items())


def _encoded(value: str) -> str:
    return quote(value, safe="/:.-_~")
