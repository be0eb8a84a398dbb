"""`cachefleet render` and the builders behind it: valid objects, owned, labelled, hashed."""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from support.kube.crd_schema import EXAMPLES
from support.kube.validation import validate_child

from cachefleet.cli.main import main
from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import CONFIG_HASH_ANNOTATION, Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.runtime.config import load_settings

KUBERNETES_VERSION = "1.32"
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
#: The generated cache secret these renders stand in (the operator reads or makes one).
CACHE_SECRET = "generated-cache-secret-0123456789"
BASE: dict[str, Any] = {
    "replicas": 2,
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models", "subPath": "repo"}}},
}
SPECS: dict[str, dict[str, Any]] = {
    "cpu-local": {"cache": {"mode": "local"}},
    "gpu-tiered": {
        "runtime": {
            "gpus": 2,
            "nodeSelector": {"gpu": "a100"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        }
    },
    "persistence": {
        "cache": {
            "redis": {
                "persistence": {
                    "mode": "rdb+aof",
                    "size": "20Gi",
                    "storageClassName": "fast",
                    "retainOnDelete": True,
                }
            }
        }
    },
    "external": {
        "cache": {
            "mode": "redis",
            "redis": {
                "external": {
                    "url": "redis://shared:6379/0",
                    "passwordSecretRef": {"name": "shared"},
                }
            },
        }
    },
    "autoscaling": {
        "runtime": {"resources": {"requests": {"cpu": "1"}}},
        "autoscaling": {"minReplicas": 1, "maxReplicas": 5},
    },
    "image-models": {"model": {"name": "m", "repository": {"image": {"image": "models:1"}}}},
    "no-auth": {
        "cache": {"redis": {"auth": {"enabled": False}, "networkPolicy": {"enabled": False}}}
    },
}


def render(extra: dict[str, Any], password: str | None = "s3cret") -> list[dict[str, Any]]:
    spec = parse_spec({**copy.deepcopy(BASE), **copy.deepcopy(extra)})
    return build_children(spec, owner=OWNER, redis_password=password, cache_secret=CACHE_SECRET)


def by_kind(children: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [c for c in children if c["kind"] == kind and name in (None, c["metadata"]["name"])]
    assert len(matches) == 1, [c["metadata"]["name"] for c in matches]
    return matches[0]


def runtime_config(children: list[dict[str, Any]]) -> dict[str, Any]:
    """The runtime's ConfigMap (named by its content)."""
    [found] = [c for c in children if c["kind"] == "ConfigMap" and "config.yaml" in c["data"]]
    return found


def kinds(children: list[dict[str, Any]]) -> set[str]:
    return {c["kind"] for c in children}


def pod_hash(children: list[dict[str, Any]], kind: str) -> str:
    annotations = by_kind(children, kind)["spec"]["template"]["metadata"]["annotations"]
    return str(annotations[CONFIG_HASH_ANNOTATION])


@pytest.mark.parametrize("name", SPECS)
def test_every_child_is_valid_owned_and_labelled(name: str) -> None:
    for child in render(SPECS[name]):
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
        meta = child["metadata"]
        assert meta["namespace"] == "ml"
        [reference] = meta["ownerReferences"]
        assert reference["controller"] is True
        assert reference["uid"] == OWNER.uid
        assert reference["kind"] == "CachedInferenceService"
        for label in ("name", "instance", "component", "managed-by"):
            assert f"app.kubernetes.io/{label}" in meta["labels"]


@functools.cache
def rendered(path: Path) -> subprocess.CompletedProcess[str]:
    """``cachefleet render path`` run once in a process of its own, for every test that reads
    what it printed."""
    result = render_command(str(path))
    assert result.returncode == 0, result.stderr
    return result


def rendered_here(path: Path) -> str:
    """What ``cachefleet render path`` prints when run in this process: another process than
    ``rendered``'s, with its own hash seed and random state."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert main(["render", str(path)]) == 0, err.getvalue()
    return out.getvalue()


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_render_command_prints_valid_objects_for_every_example(path: Path) -> None:
    result = rendered(path)
    documents = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert {"Deployment", "Service", "ConfigMap"} <= kinds(documents)
    for document in documents:
        validate_child(document)  # a ScaledObject against KEDA's schema


def test_render_command_explains_a_bad_spec(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "cachefleet.io/v1alpha1",
                "kind": "CachedInferenceService",
                "metadata": {"name": "bad"},
                "spec": {"model": {"name": "m", "repository": {}}},
            }
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "cachefleet.cli.main", "render", str(bad)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert "set exactly one of model.repository.pvc or model.repository.image" in result.stderr
    assert result.stdout == ""


def test_local_mode_creates_no_redis_and_external_only_points_at_it() -> None:
    assert "StatefulSet" not in kinds(render(SPECS["cpu-local"]))
    external = render(SPECS["external"])
    assert "StatefulSet" not in kinds(external)
    # The only Secret of its own is the cache secret (the Redis password is the user's).
    assert [c["metadata"]["name"] for c in external if c["kind"] == "Secret"] == ["svc-fleet"]
    container = by_kind(external, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    password, cache_secret = container["env"][:2]  # then the admin token and restrictions
    assert password["name"] == "CACHEFLEET_REDIS_PASSWORD"
    assert password["valueFrom"]["secretKeyRef"] == {"name": "shared", "key": "password"}
    assert cache_secret["name"] == "CACHEFLEET_CACHE_SECRET"
    assert cache_secret["valueFrom"]["secretKeyRef"] == {"name": "svc-fleet", "key": "cache-secret"}


@pytest.mark.parametrize(
    ("external", "mode", "master"),
    [
        ({"url": "redis://seed:6379", "mode": "cluster"}, "cluster", None),
        (
            {"url": "redis://s:26379", "mode": "sentinel", "sentinelMaster": "main"},
            "sentinel",
            "main",
        ),
        ({"url": "redis://one:6379"}, "standalone", None),
    ],
)
def test_external_redis_mode_reaches_the_runtime_settings(
    external: dict[str, str], mode: str, master: str | None, tmp_path: Path
) -> None:
    children = render({"cache": {"mode": "tiered", "redis": {"external": external}}})
    assert "StatefulSet" not in kinds(children)
    path = tmp_path / "config.yaml"
    path.write_text(runtime_config(children)["data"]["config.yaml"])
    import argparse

    settings = load_settings(argparse.Namespace(config=path), environ={})
    assert settings.redis.url == external["url"]
    assert (settings.redis.mode, settings.redis.sentinel_master) == (mode, master)


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        ({}, 1024 * 2**20),
        ({"resources": {"limits": {"memory": "8Gi"}}}, 2 * 2**30),
        ({"workers": 2, "resources": {"limits": {"memory": "8Gi"}}}, 2**30),
    ],
    ids=["default", "a-quarter-of-the-limit", "shared-by-workers"],
)
def test_the_inflight_budget_is_derived_from_the_memory_limit(
    runtime: dict[str, Any], expected: int, tmp_path: Path
) -> None:
    children = render({"runtime": runtime})
    path = tmp_path / "config.yaml"
    path.write_text(runtime_config(children)["data"]["config.yaml"])
    import argparse

    settings = load_settings(argparse.Namespace(config=path), environ={})
    assert settings.limits.max_inflight_bytes == expected
    assert settings.limits.head_timeout_s == 10.0


def test_sentinel_without_its_primary_stalls_with_a_message() -> None:
    with pytest.raises(SpecError, match="sentinelMaster is required in mode sentinel"):
        parse_spec(
            {"model": {"name": "m", "repository": {"pvc": {"claimName": "c"}}},
             "cache": {"redis": {"external": {"url": "redis://s:1", "mode": "sentinel"}}}}
        )  # fmt: skip


def test_runtime_configmap_is_loadable_settings_without_the_password(tmp_path: Path) -> None:
    children = render({})
    config = runtime_config(children)["data"]["config.yaml"]
    assert "s3cret" not in config
    path = tmp_path / "config.yaml"
    path.write_text(config)
    import argparse

    settings = load_settings(argparse.Namespace(config=path), environ={})
    assert settings.cache.mode == "tiered"
    assert settings.redis.url == "redis://svc-redis.ml.svc:6379/0"
    assert settings.server.port == 8000
    assert settings.server.grpc_port == 8001
    secret = by_kind(children, "Secret", "svc-redis-auth")
    assert secret["data"]["password"] == "czNjcmV0"  # base64 of s3cret
    assert "s3cret" not in by_kind(children, "ConfigMap", "svc-redis-config")["data"]["redis.conf"]


def test_runtime_pods_and_service_expose_http_and_grpc() -> None:
    children = render({})
    service = by_kind(children, "Service", "svc")
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [
        ("http", 8000, "http"),
        ("grpc", 8001, "grpc"),
    ]
    pod = by_kind(children, "Deployment")["spec"]["template"]["spec"]
    (server,) = [c for c in pod["containers"] if c["name"] == "server"]
    assert {(p["name"], p["containerPort"]) for p in server["ports"]} == {
        ("http", 8000),
        ("grpc", 8001),
    }


@pytest.mark.parametrize(("row_cache", "expected"), [(True, ("simple",)), (False, ())])
def test_row_cache_reaches_the_runtime_settings(
    tmp_path: Path, row_cache: bool, expected: tuple[str, ...]
) -> None:
    model = {**BASE["model"], "rowCache": row_cache}
    config = runtime_config(render({"model": model}))["data"]["config.yaml"]
    path = tmp_path / "config.yaml"
    path.write_text(config)
    import argparse

    settings = load_settings(argparse.Namespace(config=path), environ={})
    assert settings.models.row_cache_models == expected


def test_gpu_pods_ask_for_gpus_and_run_as_non_root_read_only() -> None:
    pod = by_kind(render(SPECS["gpu-tiered"]), "Deployment")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert pod["nodeSelector"] == {"gpu": "a100"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert container["command"][:2] == ["cachefleet", "serve"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "models")
    assert mount["subPath"] == "repo"


def test_image_repository_is_copied_by_an_init_container() -> None:
    pod = by_kind(render(SPECS["image-models"]), "Deployment")["spec"]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["image"] == "models:1"
    assert {"name": "models", "emptyDir": {"sizeLimit": "10Gi"}} in pod["volumes"]


def test_redis_conf_carries_memory_and_persistence_settings() -> None:
    conf = by_kind(render(SPECS["persistence"]), "ConfigMap", "svc-redis-config")["data"]
    text = conf["redis.conf"]
    assert "maxmemory 536870912\n" in text  # half of the 1Gi default limit, with persistence
    assert "maxmemory-policy allkeys-lru" in text
    assert "appendonly yes" in text
    assert "save 3600 1 300 100 60 10000" in text
    statefulset = by_kind(render(SPECS["persistence"]), "StatefulSet")["spec"]
    [claim] = statefulset["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["spec"]["storageClassName"] == "fast"
    assert statefulset["persistentVolumeClaimRetentionPolicy"]["whenDeleted"] == "Retain"
    assert "volumeClaimTemplates" not in by_kind(render({}), "StatefulSet")["spec"]


def test_live_settings_stay_out_of_the_redis_hash_but_persistence_does_not() -> None:
    base = render({"cache": {"redis": {"maxmemory": "512Mi"}}})
    resized = render({"cache": {"redis": {"maxmemory": "600Mi", "maxmemoryPolicy": "allkeys-lfu"}}})
    persistent = render(
        {"cache": {"redis": {"maxmemory": "512Mi", "persistence": {"mode": "aof", "size": "1Gi"}}}}
    )
    assert pod_hash(base, "StatefulSet") == pod_hash(resized, "StatefulSet")
    conf = by_kind(resized, "ConfigMap", "svc-redis-config")["data"]["redis.conf"]
    assert "maxmemory 629145600" in conf
    assert "maxmemory-policy allkeys-lfu" in conf
    assert pod_hash(base, "StatefulSet") != pod_hash(persistent, "StatefulSet")


def test_a_runtime_config_change_rolls_the_runtime_pods() -> None:
    assert pod_hash(render({}), "Deployment") != pod_hash(
        render({"cache": {"ttl": "2h"}}), "Deployment"
    )
    assert pod_hash(render({}), "Deployment") == pod_hash(render({}), "Deployment")


def test_maxmemory_defaults_to_a_share_of_the_limit_and_must_fit() -> None:
    limits = {"resources": {"limits": {"memory": "4Gi"}}}
    conf = by_kind(render({"cache": {"redis": limits}}), "ConfigMap", "svc-redis-config")
    assert f"maxmemory {3 * 2**30}\n" in conf["data"]["redis.conf"]  # 75% of 4Gi
    with pytest.raises(SpecError, match="does not fit in the Redis memory limit 4Gi"):
        render({"cache": {"redis": {**limits, "maxmemory": "4Gi"}}})


def test_autoscaling_adds_an_hpa_and_leaves_replicas_to_it() -> None:
    children = render(SPECS["autoscaling"])
    hpa = by_kind(children, "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (1, 5)
    assert "replicas" not in by_kind(children, "Deployment")["spec"]
    assert by_kind(render({}), "Deployment")["spec"]["replicas"] == 2


def test_network_policy_admits_only_runtime_and_operator_pods() -> None:
    policy = by_kind(render({}), "NetworkPolicy")["spec"]
    [rule] = policy["ingress"]
    sources = rule["from"]
    assert sources[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "runtime"
    assert sources[0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == "svc"
    assert sources[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert "NetworkPolicy" not in kinds(render(SPECS["no-auth"]))


def test_redis_probes_authenticate_and_the_container_is_locked_down() -> None:
    pod = by_kind(render({}), "StatefulSet")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["REDISCLI_AUTH"]["valueFrom"]["secretKeyRef"]["name"] == "svc-redis-auth"
    assert "redis-cli ping" in container["readinessProbe"]["exec"]["command"][-1]
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    no_auth = by_kind(render(SPECS["no-auth"], password=None), "StatefulSet")
    assert no_auth["spec"]["template"]["spec"]["containers"][0]["env"] == []


def test_a_new_generated_password_rolls_redis_and_the_runtime_pods() -> None:
    first, second = render({}, password="one"), render({}, password="two")
    assert pod_hash(first, "StatefulSet") != pod_hash(second, "StatefulSet")
    assert pod_hash(first, "Deployment") != pod_hash(second, "Deployment")
    annotations = by_kind(first, "StatefulSet")["spec"]["template"]["metadata"]["annotations"]
    assert "one" not in str(annotations)


def test_render_output_is_plain_yaml_without_aliases() -> None:
    result = rendered(EXAMPLES[0])
    assert "&id" not in result.stdout
    assert "*id" not in result.stdout


def service_body(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {**copy.deepcopy(BASE), **copy.deepcopy(extra)},
    }


def render_command(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "cachefleet.cli.main", "render", *args]
    return subprocess.run(command, capture_output=True, text=True)


def admitted_operator_namespace(output: str) -> str:
    documents = [d for d in yaml.safe_load_all(output) if d]
    [policy] = [d for d in documents if d["kind"] == "NetworkPolicy"]
    [rule] = policy["spec"]["ingress"]
    [operator] = [s for s in rule["from"] if "namespaceSelector" in s]
    labels = operator["namespaceSelector"]["matchLabels"]
    return str(labels["kubernetes.io/metadata.name"])


def test_render_admits_the_operator_from_the_namespace_it_is_told(tmp_path: Path) -> None:
    example = tmp_path / "svc.yaml"
    example.write_text(yaml.safe_dump(service_body("svc", {})))
    default = render_command(str(example))
    assert default.returncode == 0, default.stderr
    assert admitted_operator_namespace(default.stdout) == "cachefleet-system"  # as the chart
    elsewhere = render_command(str(example), "--operator-namespace", "platform-ops")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert admitted_operator_namespace(elsewhere.stdout) == "platform-ops"
    for document in yaml.safe_load_all(elsewhere.stdout):
        if document:
            kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)

    # A namespace named in the spec still wins over the flag.
    named = {"redis": {"networkPolicy": {"operatorNamespace": "from-spec"}}}
    example.write_text(yaml.safe_dump(service_body("svc", {"cache": named})))
    spec_wins = render_command(str(example), "--operator-namespace", "platform-ops")
    assert admitted_operator_namespace(spec_wins.stdout) == "from-spec"


def test_render_refuses_an_operator_namespace_that_is_not_a_namespace_name(
    tmp_path: Path,
) -> None:
    example = tmp_path / "svc.yaml"
    example.write_text(yaml.safe_dump(service_body("svc", {})))
    result = render_command(str(example), "--operator-namespace", "Platform_Ops")
    assert result.returncode == 2
    assert "--operator-namespace" in result.stderr
    assert "not a namespace name" in result.stderr
    assert result.stdout == ""


def test_each_service_gets_its_own_cache_namespace_and_secret_unless_it_names_them() -> None:
    children = render({})
    config = runtime_config(children)["data"]["config.yaml"]
    assert "namespace: ml/svc" in config
    assert CACHE_SECRET not in config
    generated = by_kind(children, "Secret", "svc-fleet")
    assert generated["data"] == {"cache-secret": base64.b64encode(CACHE_SECRET.encode()).decode()}
    container = by_kind(children, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env["CACHEFLEET_CACHE_SECRET"] == {"name": "svc-fleet", "key": "cache-secret"}
    # Two services that deliberately share answers name the namespace and the secret.
    shared = render({"cache": {"namespace": "team/shared", "secretRef": {"name": "team"}}})
    assert "svc-fleet" not in {c["metadata"]["name"] for c in shared}
    config = runtime_config(shared)["data"]["config.yaml"]
    assert "namespace: team/shared" in config
    container = by_kind(shared, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert env["CACHEFLEET_CACHE_SECRET"] == {"name": "team", "key": "cache-secret"}
    # Without Redis there is nothing to share, and no secret.
    local = render({"cache": {"mode": "local"}})
    assert "Secret" not in kinds(local)


def test_a_cache_namespace_that_would_make_ambiguous_keys_stalls() -> None:
    with pytest.raises(SpecError, match=r"cache\.namespace"):
        parse_spec({**copy.deepcopy(BASE), "cache": {"namespace": "a:b"}})


def test_cache_admission_reaches_the_runtime_only_when_not_the_default() -> None:
    """``spec.cache.admission: always`` turns the runtime's per-model admission off; ``auto``
    (the default) leaves the runtime's own default in place."""
    default = runtime_config(render({}))["data"]["config.yaml"]
    assert "admission" not in default
    always = render({"cache": {"admission": "always"}})
    config = yaml.safe_load(runtime_config(always)["data"]["config.yaml"])
    assert config["cache"]["admission"] == "always"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_render_is_the_same_on_every_run_and_renders_no_generated_secret(path: Path) -> None:
    first = rendered(path)
    # A rendering kept in Git changes only with its input.
    assert first.stdout == rendered_here(path)
    documents = [d for d in yaml.safe_load_all(first.stdout) if d]
    name = yaml.safe_load(path.read_text())["metadata"]["name"]
    generated = {f"{name}-redis-auth", f"{name}-fleet"}
    assert not [
        d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"] in generated
    ]
    if f"{name}-fleet" in first.stdout:  # the pods read it: the user is told it is left out
        assert "not rendered: the Secrets the operator generates in the cluster" in first.stderr
        assert f"{name}-fleet, keys admin-token" in first.stderr
