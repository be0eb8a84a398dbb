"""The CRD: a valid apiextensions/v1 object, structural and documented, with working CEL rules."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, get_args

import jsonschema
import kubernetes_validate
import pytest
import yaml
from support.kube.crd_schema import (
    EXAMPLES,
    apply_defaults,
    cel_failures,
    cel_rules,
    load_crd,
    schema,
    to_json_schema,
)

from cachefleet.operator.manifests.spec import Cache
from cachefleet.runtime.config import CacheMode

KUBERNETES_VERSION = "1.32"
MAXMEMORY_POLICIES = {
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
}


def minimal(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}}
    }
    base.update(spec)
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": "x"},
        "spec": base,
    }


def test_crd_is_a_valid_apiextensions_v1_object() -> None:
    kubernetes_validate.validate(load_crd(), KUBERNETES_VERSION, strict=True)


def test_crd_names_match_the_contract() -> None:
    crd = load_crd()["spec"]
    assert crd["group"] == "cachefleet.io"
    assert crd["names"]["kind"] == "CachedInferenceService"
    assert crd["names"]["plural"] == "cachedinferenceservices"
    assert crd["names"]["shortNames"] == ["cis"]
    version = crd["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"]["status"] == {}
    assert version["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Ready", "Replicas", "Cache mode", "URL", "Hit ratio", "Redis memory", "Age"} <= columns


def test_every_field_is_described_and_typed() -> None:
    def walk(node: dict[str, Any], path: str) -> list[str]:
        problems = []
        for name, sub in node.get("properties", {}).items():
            here = f"{path}.{name}"
            if name != "metadata" and "description" not in sub:
                problems.append(f"{here}: no description")
            if not ("type" in sub or sub.get("x-kubernetes-int-or-string")):
                problems.append(f"{here}: no type (not structural)")
            problems += walk(sub, here)
        if "items" in node:
            problems += walk(node["items"], f"{path}[]")
        return problems

    assert walk(schema(), "") == []


def test_every_maxmemory_policy_is_allowed() -> None:
    redis = schema()["properties"]["spec"]["properties"]["cache"]["properties"]["redis"]
    assert set(redis["properties"]["maxmemoryPolicy"]["enum"]) == MAXMEMORY_POLICIES


def test_the_cache_modes_are_the_runtimes() -> None:
    """One definition of the modes: the runtime's ``--cache``, which the spec model takes and
    the CRD's enum lists, so none of the three can offer a mode the others refuse."""
    cache = schema()["properties"]["spec"]["properties"]["cache"]["properties"]
    assert cache["mode"]["enum"] == list(get_args(CacheMode))
    assert get_args(Cache.model_fields["mode"].annotation) == get_args(CacheMode)


def test_every_cel_rule_compiles_and_has_a_message() -> None:
    import celpy

    environment = celpy.Environment()
    rules = list(cel_rules(schema()))
    assert len(rules) >= 5
    for _, rule in rules:
        environment.compile(rule["rule"])
        assert rule["message"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_pass_the_schema_and_every_cel_rule(path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    jsonschema.validate(apply_defaults(schema(), obj), to_json_schema(schema()))
    assert cel_failures(obj) == []


def test_defaults_fill_a_minimal_object() -> None:
    spec = apply_defaults(schema(), minimal())["spec"]
    assert spec["replicas"] == 1
    assert spec["cache"]["mode"] == "tiered"
    assert spec["runtime"]["gpus"] == 0
    assert cel_failures(minimal()) == []


INVALID = {
    "both repository sources": (
        {
            "model": {
                "name": "m",
                "repository": {"pvc": {"claimName": "a"}, "image": {"image": "i"}},
            }
        },
        "exactly one of model.repository.pvc or model.repository.image",
    ),
    "no repository source": (
        {"model": {"name": "m", "repository": {}}},
        "exactly one of model.repository.pvc or model.repository.image",
    ),
    "storageUri beside a repository": (
        {
            "model": {
                "name": "m",
                "storageUri": "s3://b/m",
                "repository": {"pvc": {"claimName": "a"}},
            }
        },
        "set exactly one of model.storageUri or model.repository",
    ),
    "neither storageUri nor a repository": (
        {"model": {"name": "m"}},
        "set exactly one of model.storageUri or model.repository",
    ),
    "a Secret for a claim": (
        {"model": {"name": "m", "storageUri": "pvc://models/repo", "storageSecretName": "s"}},
        "storageSecretName is read only with an s3://, gs:// or https://",
    ),
    "a Secret without a storageUri": (
        {
            "model": {
                "name": "m",
                "repository": {"pvc": {"claimName": "a"}},
                "storageSecretName": "s",
            }
        },
        "storageSecretName is read only with an s3://, gs:// or https://",
    ),
    "a storageUri climbing out": (
        {"model": {"name": "m", "storageUri": "pvc://models/repo/../../etc"}},
        "must not contain '.' or '..' path segments",
    ),
    "credentials in a storageUri": (
        {"model": {"name": "m", "storageUri": "https://user:pw@example.com/m.onnx"}},
        "carries credentials",
    ),
    "absolute subPath": (
        {"model": {"name": "m", "repository": {"pvc": {"claimName": "a", "subPath": "/etc"}}}},
        "subPath must be a relative path",
    ),
    "external with managed settings": (
        {"cache": {"redis": {"external": {"url": "redis://r:6379"}, "maxmemory": "1Gi"}}},
        "cannot be combined with managed-Redis settings",
    ),
    "sentinel without its primary's name": (
        {"cache": {"redis": {"external": {"url": "redis://s:26379", "mode": "sentinel"}}}},
        "sentinelMaster is required in mode sentinel",
    ),
    "primary name outside sentinel mode": (
        {"cache": {"redis": {"external": {"url": "redis://r:6379", "sentinelMaster": "m"}}}},
        "sentinelMaster is required in mode sentinel",
    ),
    "cluster over a unix socket": (
        {"cache": {"redis": {"external": {"url": "unix:///r.sock", "mode": "cluster"}}}},
        "must be redis:// or rediss:// in modes cluster and sentinel",
    ),
    "persistence without size": (
        {"cache": {"redis": {"persistence": {"mode": "aof"}}}},
        "persistence.size is required",
    ),
    "min above max replicas": (
        {
            "autoscaling": {"minReplicas": 5, "maxReplicas": 2},
            "runtime": {"resources": {"requests": {"cpu": "1"}}},
        },
        "minReplicas must not exceed autoscaling.maxReplicas",
    ),
    "autoscaling without cpu request": (
        {"autoscaling": {"maxReplicas": 4}},
        "needs runtime.resources.requests.cpu",
    ),
    "tracing ratio without a ratio sampler": (
        {"runtime": {"tracing": {"endpoint": "http://otel:4318", "ratio": 0.5}}},
        "ratio is read only by the samplers traceidratio",
    ),
    "tracing resource attribute key with a comma": (
        {
            "runtime": {
                "tracing": {"endpoint": "http://otel:4318", "resourceAttributes": {"a,b": "x"}}
            }
        },
        "resourceAttributes keys",
    ),
    "health restricted (every probe would fail)": (
        {"runtime": {"restrictedApis": ["cache", "health"]}},
        "must not hold health",
    ),
}


@pytest.mark.parametrize("case", INVALID, ids=str)
def test_cel_rules_reject_invalid_specs(case: str) -> None:
    spec, message = INVALID[case]
    obj = minimal()
    obj["spec"].update(copy.deepcopy(spec))
    failures = cel_failures(obj)
    assert any(message in failure for failure in failures), failures


VALID = {
    "external redis with password": {
        "cache": {
            "mode": "redis",
            "redis": {"external": {"url": "rediss://r:6380/1", "passwordSecretRef": {"name": "s"}}},
        }
    },
    "external redis cluster": {
        "cache": {"redis": {"external": {"url": "rediss://seed:6379", "mode": "cluster"}}}
    },
    "external sentinel": {
        "cache": {
            "redis": {
                "external": {
                    "url": "redis://sentinel:26379",
                    "mode": "sentinel",
                    "sentinelMaster": "mymaster",
                }
            }
        }
    },
    "persistence with size": {
        "cache": {"redis": {"persistence": {"mode": "rdb+aof", "size": "5Gi"}}}
    },
    "persistence off without size": {"cache": {"redis": {"persistence": {"mode": "none"}}}},
    "equal min and max replicas": {
        "autoscaling": {"minReplicas": 3, "maxReplicas": 3},
        "runtime": {"resources": {"requests": {"cpu": "500m"}}},
    },
    "image repository": {"model": {"name": "m", "repository": {"image": {"image": "x/y:1"}}}},
    "s3 storage with a Secret": {
        "model": {"name": "m", "storageUri": "s3://bucket/models", "storageSecretName": "s3"}
    },
    "gcs storage with a size limit": {
        "model": {"name": "m", "storageUri": "gs://bucket/m", "storageSizeLimit": "20Gi"}
    },
    "https file": {"model": {"name": "m", "storageUri": "https://example.com/models/m.onnx"}},
    "claim by URI": {"model": {"name": "m", "storageUri": "pvc://models/repo"}},
    "integer sizes": {"cache": {"ttl": 60, "local": {"size": 1048576}}},
    "tracing with a ratio": {
        "runtime": {
            "tracing": {
                "endpoint": "https://otel.example:4318",
                "sampler": "parentbased_traceidratio",
                "ratio": 0.25,
                "headersSecretRef": {"name": "otlp"},
            }
        }
    },
}


@pytest.mark.parametrize("case", VALID, ids=str)
def test_cel_rules_and_schema_accept_valid_specs(case: str) -> None:
    obj = minimal()
    obj["spec"].update(copy.deepcopy(VALID[case]))
    assert cel_failures(obj) == []
    jsonschema.validate(apply_defaults(schema(), obj), to_json_schema(schema()))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        (("cache", "local", "size"), "lots"),
        (("cache", "ttl"), "1 hour"),
        (("cache", "mode"), "disk"),
        (("cache", "redis", "maxmemoryPolicy"), "lru"),
        (("replicas",), -1),
        (("runtime", "tracing"), {"endpoint": "otel:4318"}),
        (("runtime", "tracing"), {"endpoint": "http://otel:4318", "ratio": 2}),
        (("runtime", "tracing"), {"endpoint": "http://otel:4318", "sampler": "sometimes"}),
        (("runtime", "tracing"), {"sampler": "always_on"}),
        (("model", "storageUri"), "ftp://host/m.onnx"),
        (("model", "storageUri"), "s3:/bucket"),
        (("model", "storageSizeLimit"), "big"),
    ],
)
def test_schema_rejects_bad_values(field: tuple[str, ...], value: Any) -> None:
    obj = minimal()
    node = obj["spec"]
    for part in field[:-1]:
        node = node.setdefault(part, {})
    node[field[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(apply_defaults(schema(), obj), to_json_schema(schema()))


def test_examples_cover_the_documented_cases_and_explain_themselves() -> None:
    names = {path.stem for path in EXAMPLES}
    assert {"simple-cpu", "densenet-gpu-aof", "external-redis", "autoscaling"} <= names
    for path in EXAMPLES:
        assert path.read_text().startswith("# "), f"{path.name} needs a comment header"
