"""Hypothesis strategies for CachedInferenceService specs, derived from the CRD's schema.

``schema_specs`` gives anything the openAPIV3Schema allows before its CEL rules (every property,
enums, bounds, patterns; good and bad quantities in size fields). ``valid_specs`` makes those
valid; ``cases`` mixes the three kinds a test needs: anything, valid, and broken on purpose with
the words the operator's message must then contain.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import hypothesis.strategies as st

from support.kube.crd_schema import schema

BYTE_UNITS = ("", "Ki", "Mi", "Gi", "k", "M", "G")
good_bytes = st.one_of(
    st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 4096), st.sampled_from(BYTE_UNITS)),
    st.integers(1, 2**34),
)
bad_quantities = st.sampled_from(
    ["lots", "-1Gi", "1.5.5Gi", "Gi", "12XB", "", " 1Gi", "1Gi ", "ten", "0x10", "1 Gi", "∞"]
)
sizes = st.one_of(good_bytes, good_bytes, good_bytes, bad_quantities)
cpu_quantities = st.one_of(
    st.sampled_from(["100m", "250m", "1", "2", "0.5", 4]), st.sampled_from(["fast", "-1", "1cpu"])
)
durations = st.one_of(
    st.sampled_from(["30s", "5m", "1h", "2h30m", "90", 3600, "1.5h"]),
    st.sampled_from(["forever", "-5s", "1y", "h", ""]),
)
names = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
resource_maps = st.fixed_dictionaries({}, optional={"cpu": cpu_quantities, "memory": sizes})
resources = st.fixed_dictionaries({}, optional={"requests": resource_maps, "limits": resource_maps})
tolerations = st.lists(
    st.fixed_dictionaries(
        {"key": names, "operator": st.sampled_from(["Exists", "Equal"])},
        optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"])},
    ),
    max_size=2,
)
affinity = st.sampled_from(
    [
        {},
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                    ]
                }
            }
        },
    ]
)

GOOD_STORAGE_URIS = (
    "s3://models/team/repository",
    "gs://models/simple",
    "https://models.example.com/simple.onnx",
    "https://models.example.com/repository.zip",  # with the zip's scratch emptyDir
    "pvc://model-store/repo",
)
#: Past the schema's pattern, refused by the operator (and CEL where it can).
BAD_STORAGE_URIS = ("s3://Bad_Bucket/m", "pvc://claim/../up", "https://u:p@host/m.onnx")

GOOD_SERVER_URLS = ("grpc://triton.models:8001", "https://v2.example.com:443")


def _gpus_beside_a_server(spec: dict[str, Any]) -> None:
    spec["server"] = {"kind": "triton", "image": "triton:dev"}
    spec.setdefault("runtime", {})["gpus"] = 1


def _ca_for_a_plain_url(spec: dict[str, Any]) -> None:
    _external_beside_files(spec)
    spec["model"].pop("repository")
    spec["server"]["tls"] = {"caConfigMapRef": {"name": "ca"}}


def _external_beside_files(spec: dict[str, Any]) -> None:
    spec["server"] = {"kind": "external", "url": GOOD_SERVER_URLS[0]}
    for name in ("storageUri", "storageSecretName"):
        spec["model"].pop(name, None)
    spec["model"]["repository"] = {"pvc": {"claimName": "models"}}


SPREAD = {
    "maxSkew": 1,
    "topologyKey": "kubernetes.io/hostname",
    "whenUnsatisfiable": "DoNotSchedule",
}

# Fields whose generic strategy (from the schema's type and pattern) would be too narrow or
# too wide: sizes get good and bad quantities, free-form maps get realistic content.
OVERRIDES: dict[str, st.SearchStrategy[Any]] = {
    "replicas": st.integers(0, 5),
    "model.name": st.sampled_from(["simple", "densenet_onnx", "m-1.v2"]),
    "model.repository.pvc.claimName": names,
    "model.repository.pvc.subPath": st.sampled_from(["", "repo", "a/b", "/abs", "../up", "a/../b"]),
    "model.repository.image.image": st.sampled_from(["models:1", "registry.example.com/m:2"]),
    "model.repository.image.path": st.sampled_from(["/models", "/srv/repo"]),
    "model.repository.image.sizeLimit": sizes,
    "model.storageUri": st.sampled_from([*GOOD_STORAGE_URIS, *BAD_STORAGE_URIS]),
    "model.storageSecretName": names,
    "model.storageSizeLimit": sizes,
    "imagePullSecrets": st.lists(st.fixed_dictionaries({"name": names}), max_size=2),
    "runtime.image": st.sampled_from(["ghcr.io/cachefleet/cachefleet:0.1.0", "runtime:dev"]),
    "runtime.topologySpreadConstraints": st.sampled_from([[], [SPREAD]]),
    "runtime.podAnnotations": st.dictionaries(names, names, max_size=2),
    "runtime.podLabels": st.dictionaries(names, names, max_size=2),
    "runtime.gpus": st.integers(0, 4),
    "runtime.workers": st.integers(1, 4),
    "runtime.resources": resources,
    "runtime.nodeSelector": st.dictionaries(names, names, max_size=2),
    "runtime.tolerations": tolerations,
    "runtime.affinity": affinity,
    "runtime.restrictedApis": st.lists(
        st.sampled_from(["model-repository", "shared-memory", "cache", "inference", "statistics"]),
        unique=True,
        max_size=3,
    ),
    "runtime.tls.secretName": names,
    "runtime.tracing.endpoint": st.sampled_from(
        [
            "http://otel-collector.observability:4318",
            "https://otlp.example.com",
            "http://10.0.0.7:4318/",
        ]
    ),
    "runtime.tracing.ratio": st.floats(0, 1),
    "runtime.tracing.resourceAttributes": st.dictionaries(
        st.sampled_from(["team", "deployment.environment.name", "k8s.cluster.name", "a,b"]),
        names,
        max_size=2,
    ),
    "server.image": st.sampled_from(["nvcr.io/nvidia/tritonserver:24.08-py3", "triton:dev"]),
    "server.args": st.lists(
        st.sampled_from(["--log-verbose=1", "--exit-timeout-secs=20", "--grpc-port=8001"]),
        max_size=2,
    ),
    "server.resources": resources,
    "server.gpus": st.integers(0, 2),
    "server.env": st.lists(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["A", "CUDA_MODULE_LOADING"])}, optional={"value": names}
        ),
        max_size=2,
        unique_by=lambda v: v["name"],
    ),
    "server.url": st.sampled_from([*GOOD_SERVER_URLS, "grpc://triton", "t:8001"]),
    "server.authSecretRef": st.fixed_dictionaries({"name": names, "key": names}),
    "server.authHeader": st.sampled_from(["Authorization", "triton-grpc-protocol-token"]),
    "cache.ttl": durations,
    "cache.local.size": sizes,
    "cache.redis.external.url": st.sampled_from(
        ["redis://shared:6379/0", "rediss://cache.example.com:6380", "unix:///run/redis.sock"]
    ),
    "cache.redis.image": st.sampled_from(["redis:7.4-alpine", "valkey/valkey:8"]),
    "cache.redis.resources": resources,
    "cache.redis.maxmemory": sizes,
    "cache.redis.persistence.size": sizes,
    "cache.redis.persistence.storageClassName": st.one_of(st.none(), names),
    "cache.redis.persistence.save": st.sampled_from(["3600 1 300 100", "60 1000", ""]),
    "cache.redis.networkPolicy.operatorNamespace": names,
    "autoscaling.minReplicas": st.integers(0, 6),
    "autoscaling.target": st.sampled_from([0.001, 0.5, 4, 40.25]),
    "autoscaling.prometheus.activationThreshold": st.sampled_from([0, 0.5, 10]),
    "autoscaling.maxReplicas": st.integers(1, 6),
    "autoscaling.targetCPUUtilizationPercentage": st.integers(1, 100),
}


def from_schema(node: dict[str, Any], path: str = "") -> st.SearchStrategy[Any]:
    """Values the schema node accepts (before CEL), with the overrides above where they apply."""
    if path in OVERRIDES:
        return OVERRIDES[path]
    if "enum" in node:
        return st.sampled_from(node["enum"])
    kind = node.get("type")
    if kind == "object" and "properties" in node:
        required = set(node.get("required", ()))
        properties = {
            name: from_schema(sub, f"{path}.{name}".lstrip(".") if path else name)
            for name, sub in node["properties"].items()
        }
        return st.fixed_dictionaries(
            {k: v for k, v in properties.items() if k in required},
            optional={k: v for k, v in properties.items() if k not in required},
        )
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        return st.integers(node.get("minimum", 0), node.get("maximum", 8))
    if kind == "string":
        pattern = node.get("pattern")
        return st.from_regex(pattern, fullmatch=True) if pattern else names
    raise AssertionError(f"no strategy for {path}: {node}")


def spec_node() -> dict[str, Any]:
    return dict(schema()["properties"]["spec"])


schema_specs = from_schema(spec_node())


@dataclass(frozen=True)
class Breakage:
    """One way to make a spec invalid, and what the operator's message must then say."""

    name: str
    apply: Callable[[dict[str, Any]], None]
    says: str


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = spec
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = copy.deepcopy(value)

    return apply


def _managed(spec: dict[str, Any]) -> None:
    spec.setdefault("cache", {})["mode"] = "tiered"
    spec["cache"].setdefault("redis", {}).pop("external", None)


def _maxmemory_over_limit(limit_mi: int) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        _managed(spec)
        redis = spec["cache"]["redis"]
        redis["resources"] = {"limits": {"memory": f"{limit_mi}Mi"}}
        redis["maxmemory"] = f"{limit_mi}Mi"  # always above the ceiling (limit less headroom)

    return apply


def _both_sources(spec: dict[str, Any]) -> None:
    spec["model"]["repository"] = {"pvc": {"claimName": "m"}, "image": {"image": "models:1"}}


def _both_model_sources(spec: dict[str, Any]) -> None:
    spec["model"]["repository"] = {"pvc": {"claimName": "m"}}
    spec["model"]["storageUri"] = "s3://models/m"


def _storage_uri(uri: str) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        spec["model"].pop("repository", None)
        spec["model"]["storageUri"] = uri

    return apply


def _external_and_managed(spec: dict[str, Any]) -> None:
    spec.setdefault("cache", {})["mode"] = "redis"
    spec["cache"]["redis"] = {"external": {"url": "redis://x:6379"}, "maxmemory": "1Gi"}


def _persistence_without_size(mode: str) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        _managed(spec)
        spec["cache"]["redis"]["persistence"] = {"mode": mode}

    return apply


def _min_above_max(low: int) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        spec.setdefault("runtime", {})["resources"] = {"requests": {"cpu": "1"}}
        spec["autoscaling"] = {"minReplicas": low + 1, "maxReplicas": low}

    return apply


def _spec_not_an_object(value: Any) -> Callable[[dict[str, Any]], None]:
    def apply(spec: dict[str, Any]) -> None:
        spec.clear()
        spec["__replace__"] = value

    return apply


breakages = st.one_of(
    st.builds(
        lambda mi: Breakage("maxmemory>limit", _maxmemory_over_limit(mi), "does not fit"),
        st.integers(64, 8192),
    ),
    st.builds(
        lambda mode: Breakage(
            "persistence without size", _persistence_without_size(mode), "persistence.size"
        ),
        st.sampled_from(["rdb", "aof", "rdb+aof"]),
    ),
    st.builds(
        lambda low: Breakage("min>max", _min_above_max(low), "must not exceed"),
        st.integers(1, 5),
    ),
    st.just(
        Breakage(
            "autoscaling without cpu",
            _set("autoscaling", {"maxReplicas": 3}),
            "runtime.resources.requests.cpu",
        )
    ),
    st.just(Breakage("both sources", _both_sources, "exactly one of model.repository")),
    st.just(Breakage("GPUs beside a server", _gpus_beside_a_server, "runtime.gpus must be 0")),
    st.just(
        Breakage("a CA for a plain server url", _ca_for_a_plain_url, "server.tls needs a grpcs://")
    ),
    st.just(
        Breakage(
            "an external server beside model files",
            _external_beside_files,
            "serves the external server's models",
        )
    ),
    st.builds(
        lambda sampler: Breakage(
            "tracing ratio without its sampler",
            _set(
                "runtime.tracing",
                {"endpoint": "http://otel:4318", "sampler": sampler, "ratio": 0.5},
            ),
            "runtime.tracing.ratio",
        ),
        st.sampled_from(["always_on", "parentbased_always_off"]),
    ),
    st.just(Breakage("no source", _set("model.repository", {}), "exactly one of")),
    st.just(
        Breakage(
            "storageUri and repository",
            _both_model_sources,
            "exactly one of model.storageUri or model.repository",
        )
    ),
    st.builds(
        lambda uri: Breakage("bad storageUri", _storage_uri(uri), "model.storageUri"),
        st.sampled_from(BAD_STORAGE_URIS),
    ),
    st.just(Breakage("external+managed", _external_and_managed, "cannot be combined")),
    # (An unknown field is no breakage: a newer release's CRD may store one, and the operator
    # ignores it with a warning; tests/operator/test_unknown_spec_fields.py.)
    st.builds(
        lambda where, value: Breakage(f"wrong type {where}", _set(where, value), f"spec.{where}"),
        st.sampled_from(["replicas", "runtime.gpus", "runtime.workers", "cache.mode"]),
        st.sampled_from(["two", [1], {"n": 1}, None, -3]),
    ),
    st.builds(
        lambda where, value: Breakage(
            f"not an object {where}", _set(where, value), f"spec.{where}"
        ),
        st.sampled_from(["cache", "cache.redis", "runtime", "model", "autoscaling"]),
        st.sampled_from(["tiered", 7, ["a"], True]),
    ),
    st.builds(
        lambda value: Breakage("spec not an object", _spec_not_an_object(value), "spec"),
        st.sampled_from(["tiered", 5, ["a", "b"]]),
    ),
    st.builds(
        lambda where, value: Breakage(f"bad quantity {where}", _set(where, value), "spec."),
        st.sampled_from(
            [
                "cache.local.size",
                "cache.ttl",
                "runtime.resources.limits.memory",
                "runtime.resources.requests.cpu",
            ]
        ),
        bad_quantities.filter(bool),
    ),
)


def _base(spec: dict[str, Any]) -> dict[str, Any]:
    """A schema-generated spec made valid where CEL or the operator's rules would refuse it."""
    spec = copy.deepcopy(spec)
    spec.pop("autoscaling", None)
    model = spec["model"]
    uri = model.pop("storageUri", None)
    secret = model.pop("storageSecretName", None)
    size = model.pop("storageSizeLimit", None)
    if uri in GOOD_STORAGE_URIS:  # the model from storage instead of a repository
        model.pop("repository", None)
        model["storageUri"], model["storageSizeLimit"] = uri, "1Gi" if size else "10Gi"
        if secret is not None and not uri.startswith("pvc://"):
            model["storageSecretName"] = secret
    else:
        model["repository"] = {"pvc": {"claimName": "models"}}
    cache = spec.setdefault("cache", {})
    cache["ttl"], cache["local"] = "1h", {"size": "256Mi"}
    cache["redis"] = {"maxmemoryPolicy": "allkeys-lfu"}
    spec.setdefault("runtime", {}).pop("resources", None)
    server = spec.get("server")
    if server is not None:
        _valid_server(spec, server)
    tracing = spec["runtime"].get("tracing")
    if tracing is not None:
        if not tracing.get("sampler", "").endswith("traceidratio"):
            tracing.pop("ratio", None)
        attributes = tracing.get("resourceAttributes", {})
        tracing["resourceAttributes"] = {k: v for k, v in attributes.items() if "," not in k}
    return spec


_TRITON_ONLY = ("image", "imagePullPolicy", "args", "resources", "gpus", "env")
_EXTERNAL_ONLY = ("url", "authSecretRef", "authHeader", "tls")


def _valid_server(spec: dict[str, Any], server: dict[str, Any]) -> None:
    """``spec.server`` made valid: the fields of its kind only, with the required ones, no GPUs
    on cachefleet's container, and model files for triton only."""
    spec["runtime"]["gpus"] = 0
    server.pop("resources", None)  # (bad quantities among them: see runtime.resources)
    if server["kind"] == "triton":
        for name in _EXTERNAL_ONLY:
            server.pop(name, None)
        server.setdefault("image", "triton:dev")
        server["args"] = [a for a in server.get("args", []) if not a.startswith("--grpc-port")]
        return
    for name in _TRITON_ONLY:
        server.pop(name, None)
    if server.get("url") not in GOOD_SERVER_URLS:
        server["url"] = GOOD_SERVER_URLS[0]
    if "authSecretRef" not in server:
        server.pop("authHeader", None)
    if not server["url"].startswith(("grpcs://", "https://")):
        server.pop("tls", None)
    for name in ("repository", "storageUri", "storageSecretName", "storageSizeLimit"):
        spec["model"].pop(name, None)


def broken(spec: dict[str, Any], breakage: Breakage) -> Any:
    spec = _base(spec)
    breakage.apply(spec)
    return spec.get("__replace__", spec)


@dataclass(frozen=True)
class Case:
    spec: Any
    says: str | None  # None: valid by construction; "": whatever the operator decides


valid_specs = st.builds(_base, schema_specs)
cases = st.one_of(
    st.builds(lambda spec: Case(spec, ""), schema_specs),  # anything the schema allows
    st.builds(lambda spec: Case(spec, None), valid_specs),  # valid
    st.builds(lambda spec, b: Case(broken(spec, b), b.says), schema_specs, breakages),  # broken
)
