"""The runtime fleet's scaler: a HorizontalPodAutoscaler or a KEDA ScaledObject.

Either owns the Deployment's replica count (the Deployment is then rendered without
``replicas``). The HPA scales on CPU, or on Pods metrics a metrics adapter serves from
Prometheus; KEDA reads Prometheus itself, makes its own HPA, and alone can scale to zero
(Kubernetes' HPA needs an alpha feature gate for that).
"""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests import meta, promql
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import Autoscaling, ServiceSpec

COMPONENT = "runtime"
KEDA_API_VERSION = "keda.sh/v1alpha1"
#: The kinds that own the Deployment's replica count: one at most exists at a time (KEDA's
#: admission webhook refuses a ScaledObject for a Deployment another HPA scales).
SCALER_KINDS: tuple[tuple[str, str], ...] = (
    ("autoscaling/v2", "HorizontalPodAutoscaler"),
    (KEDA_API_VERSION, "ScaledObject"),
)
#: KEDA copies a ScaledObject's labels onto the HPA it makes; without the operator's
#: managed-by label, that HPA stays out of the operator's watches and pruning (it is KEDA's).
#: KEDA 2.18 and later read this annotation; older releases copy every label, which is harmless:
#: the HPA is owned by the ScaledObject, so the operator neither prunes nor restores it.
KEDA_EXCLUDED_LABELS = {"scaledobject.keda.sh/hpa-excluded-labels": "app.kubernetes.io/managed-by"}
#: The activation trigger only wakes the fleet (KEDA scales 0 -> 1 when any trigger is active);
#: its threshold per pod is high enough that it never asks the HPA for a second pod.
ACTIVATION_ONLY_THRESHOLD = "1000000"


def build_scaler(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    """The scaler ``spec.autoscaling`` asks for (the caller checks there is one)."""
    scaling = spec.autoscaling
    assert scaling is not None
    if scaling.engine == "keda":
        return build_scaled_object(scaling, owner=owner)
    return build_hpa(scaling, owner=owner)


def _target_ref(owner: Owner) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "name": owner.name}


def build_hpa(scaling: Autoscaling, *, owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": meta.metadata(owner, owner.name, COMPONENT),
        "spec": {
            "scaleTargetRef": _target_ref(owner),
            "minReplicas": scaling.min_replicas,
            "maxReplicas": scaling.max_replicas,
            "metrics": [_hpa_metric(scaling)],
        },
    }


def _hpa_metric(scaling: Autoscaling) -> dict[str, Any]:
    if scaling.metric == "cpu":
        target = {
            "type": "Utilization",
            "averageUtilization": scaling.target_cpu_utilization_percentage,
        }
        return {"type": "Resource", "resource": {"name": "cpu", "target": target}}
    assert scaling.target is not None
    return {
        "type": "Pods",
        "pods": {
            "metric": {"name": promql.ADAPTER_METRICS[scaling.metric]},
            "target": {"type": "AverageValue", "averageValue": quantity(scaling.target)},
        },
    }


def build_scaled_object(scaling: Autoscaling, *, owner: Owner) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": _target_ref(owner),
        "minReplicaCount": scaling.min_replicas,
        "maxReplicaCount": scaling.max_replicas,
        "triggers": _keda_triggers(scaling, owner),
    }
    metadata = meta.metadata(owner, owner.name, COMPONENT)
    metadata["annotations"] = dict(KEDA_EXCLUDED_LABELS)
    return {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": metadata,
        "spec": spec,
    }


def _keda_triggers(scaling: Autoscaling, owner: Owner) -> list[dict[str, Any]]:
    triggers = [_scaling_trigger(scaling, owner)]
    if scaling.min_replicas == 0:
        triggers.append(_activation_trigger(scaling))
    return triggers


def _scaling_trigger(scaling: Autoscaling, owner: Owner) -> dict[str, Any]:
    if scaling.metric == "cpu":
        value = str(scaling.target_cpu_utilization_percentage)
        return {"type": "cpu", "metricType": "Utilization", "metadata": {"value": value}}
    prometheus = scaling.prometheus
    assert prometheus is not None  # the spec's rules: misses and queue name a server
    assert scaling.target is not None
    return {
        "type": "prometheus",
        "name": scaling.metric,
        "metadata": {
            "serverAddress": prometheus.server_address,
            "query": prometheus.query or promql.scaling_query(scaling.metric, owner),
            "threshold": number(scaling.target),
        },
    }


def _activation_trigger(scaling: Autoscaling) -> dict[str, Any]:
    """What wakes a fleet at zero: the request rate in front of the pods (the spec's rules
    require it with ``minReplicas: 0``)."""
    prometheus = scaling.prometheus
    assert prometheus is not None
    assert prometheus.activation_query is not None
    return {
        "type": "prometheus",
        "name": "activation",
        "metadata": {
            "serverAddress": prometheus.server_address,
            "query": prometheus.activation_query,
            "threshold": ACTIVATION_ONLY_THRESHOLD,
            "activationThreshold": number(prometheus.activation_threshold),
        },
    }


def number(value: float) -> str:
    """A number as KEDA's trigger metadata takes it (a string it parses as a float)."""
    return f"{value:g}" if value != int(value) else str(int(value))


def quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in thousandths (0.5 -> 500m),
    never below 1m."""
    if value == int(value):
        return str(int(value))
    return f"{max(1, round(value * 1000))}m"
