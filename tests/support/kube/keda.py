"""What a cluster with KEDA accepts as a ScaledObject: there is no KEDA schema in
kubernetes-validate, so this holds the parts of KEDA 2.20 the operator's ScaledObjects use.

- ``SCALED_OBJECT_SCHEMA``: the spec's structural schema as KEDA's CRD declares it
  (``config/crd/bases/keda.sh_scaledobjects.yaml``: field names, types, ``int32`` counts,
  ``minimum``s, required fields, ``minItems: 1`` triggers, string-only trigger metadata, and its
  CEL rule min <= max). Unknown fields are errors here (the API server would prune them
  silently, so a misspelt field would be lost).
- :func:`admission_problems`: what KEDA's admission webhook and scalers refuse beyond that (a
  ScaledObject with only cpu triggers and minReplicaCount unset or 0; a cpu trigger whose
  ``metricType`` is not Utilization or AverageValue; a prometheus trigger without
  ``serverAddress``, ``query`` or a ``threshold`` that parses as a number; two triggers with one
  name; a name too long for KEDA's label).
"""

from __future__ import annotations

from typing import Any

import jsonschema

_INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}

_TRIGGER = {
    "type": "object",
    "required": ["type", "metadata"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string", "minLength": 1},
        "name": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "metricType": {"type": "string"},
        "useCachedMetrics": {"type": "boolean"},
        "authenticationRef": {
            "type": "object",
            "required": ["name"],
            "additionalProperties": False,
            "properties": {
                "name": {"type": "string"},
                "kind": {"enum": ["TriggerAuthentication", "ClusterTriggerAuthentication"]},
            },
        },
    },
}

SCALED_OBJECT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string", "minLength": 1},
                        "envSourceContainerName": {"type": "string"},
                    },
                },
                "minReplicaCount": {**_INT32, "minimum": 0},
                "maxReplicaCount": {**_INT32, "minimum": 1},
                "idleReplicaCount": {**_INT32, "minimum": 0},
                "pollingInterval": {**_INT32, "minimum": 1},
                "cooldownPeriod": {**_INT32, "minimum": 0},
                "initialCooldownPeriod": {**_INT32, "minimum": 0},
                "triggers": {"type": "array", "minItems": 1, "items": _TRIGGER},
                "advanced": {"type": "object"},
                "fallback": {"type": "object"},
            },
        },
    },
}

LABEL_VALUE_MAX = 63


def validate_scaled_object(obj: dict[str, Any]) -> None:
    """Raise when the CRD's schema or rule, or KEDA's admission, would refuse ``obj``."""
    jsonschema.validate(obj, SCALED_OBJECT_SCHEMA)
    problems = admission_problems(obj)
    assert not problems, problems


def admission_problems(obj: dict[str, Any]) -> list[str]:
    spec = obj["spec"]
    problems = []
    low, high = spec.get("minReplicaCount"), spec.get("maxReplicaCount", 100)
    if low is not None and low > high:
        problems.append("minReplicaCount must be less than or equal to maxReplicaCount")
    name = obj["metadata"]["name"]
    if len(f"keda-hpa-{name}") > LABEL_VALUE_MAX:
        problems.append(f"HPA name keda-hpa-{name} is longer than {LABEL_VALUE_MAX} characters")
    triggers = spec["triggers"]
    names = [t["name"] for t in triggers if t.get("name")]
    if len(names) != len(set(names)):
        problems.append(f"trigger names must be unique: {names}")
    resource_only = all(t["type"] in ("cpu", "memory") for t in triggers)
    if resource_only and not low:
        problems.append("only cpu/memory triggers AND minReplica is 0 (or unset)")
    for trigger in triggers:
        problems += _trigger_problems(trigger)
    return problems


def _trigger_problems(trigger: dict[str, Any]) -> list[str]:
    metadata = trigger["metadata"]
    if trigger["type"] in ("cpu", "memory"):
        problems = []
        if trigger.get("metricType") not in ("Utilization", "AverageValue"):
            problems.append(f"{trigger['type']} trigger needs metricType Utilization|AverageValue")
        if "value" not in metadata:
            problems.append(f"{trigger['type']} trigger needs metadata.value")
        return problems
    if trigger["type"] != "prometheus":
        return [f"unexpected trigger type {trigger['type']}"]
    problems = [
        f"prometheus trigger needs metadata.{key}"
        for key in ("serverAddress", "query", "threshold")
        if not metadata.get(key)
    ]
    for key in ("threshold", "activationThreshold"):
        if key in metadata:
            try:
                float(metadata[key])
            except ValueError:
                problems.append(f"prometheus {key} {metadata[key]!r} is not a number")
    return problems
