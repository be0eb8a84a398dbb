"""spec.server: the runtime pods in front of a model server.

kind triton renders two containers per pod (Triton on loopback ports with the GPUs, cachefleet
in upstream mode on the Service's ports, both on the same model files); kind external renders
cachefleet alone, pointed at the server, its auth value only ever a secretKeyRef. Each spec is
refused alike by the CRD (schema and CEL) and by the operator's own parsing, with one message.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from support.kube.crd_schema import EXAMPLES, apply_defaults, cel_failures, schema, to_json_schema

from cachefleet.operator.manifests import upstream
from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import RUNTIME_GRPC_PORT, RUNTIME_PORT, Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.runtime.config import add_flags, load_settings
from cachefleet.runtime.preflight import check_startup

KUBERNETES_VERSION = "1.32"
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
TOKEN_SECRET = {"name": "triton-token", "key": "bearer"}
TRITON: dict[str, Any] = {
    "model": {"name": "densenet_onnx", "repository": {"pvc": {"claimName": "m", "subPath": "r"}}},
    "server": {
        "kind": "triton",
        "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
        "args": ["--log-verbose=1"],
        "gpus": 2,
        "resources": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"memory": "16Gi"}},
        "env": [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}],
    },
    "runtime": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
}
EXTERNAL: dict[str, Any] = {
    "model": {"name": "densenet_onnx"},
    "server": {
        "kind": "external",
        "url": "grpcs://triton.inference.svc:8001",
        "authSecretRef": TOKEN_SECRET,
    },
}


def render(spec: dict[str, Any]) -> list[dict[str, Any]]:
    children = build_children(
        parse_spec(copy.deepcopy(spec)), owner=OWNER, redis_password="pw", cache_secret="mac"
    )
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    return children


def one(children: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == kind]
    return found


def runtime_config(children: list[dict[str, Any]]) -> dict[str, Any]:
    [configmap] = [c for c in children if c["kind"] == "ConfigMap" and "config.yaml" in c["data"]]
    return dict(yaml.safe_load(configmap["data"]["config.yaml"]))


def runtime_service(children: list[dict[str, Any]]) -> dict[str, Any]:
    [found] = [c for c in children if c["kind"] == "Service" and c["metadata"]["name"] == "svc"]
    return found


def containers(children: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    pod = one(children, "Deployment")["spec"]["template"]["spec"]
    return {c["name"]: c for c in pod["containers"]}


def loaded_by_the_runtime(
    children: list[dict[str, Any]], tmp_path: Path, environ: dict[str, str]
) -> Any:
    """The settings `cachefleet serve` reads from the rendered command line and ConfigMap."""
    command = containers(children)["server"]["command"]
    assert command[:2] == ["cachefleet", "serve"]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(runtime_config(children)))
    argv = list(command[2:])
    argv[argv.index("--config") + 1] = str(config)
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return load_settings(parser.parse_args(argv), environ=environ)


def test_triton_runs_beside_cachefleet_on_loopback_ports_with_the_gpus_and_the_same_files(
    tmp_path: Path,
) -> None:
    children = render(TRITON)
    found = containers(children)
    assert list(found) == ["server", "triton"]
    server, triton = found["server"], found["triton"]

    # Triton: loopback HTTP and gRPC on ports clear of cachefleet's, the shared repository.
    command = triton["command"]
    assert command[:3] == [
        "tritonserver",
        "--model-repository=/models",
        "--model-control-mode=none",
    ]
    assert "--http-address=127.0.0.1" in command
    assert "--grpc-address=127.0.0.1" in command
    assert command[-1] == "--log-verbose=1"  # the user's args come after the operator's
    own_ports = {RUNTIME_PORT, RUNTIME_GRPC_PORT}
    triton_ports = {upstream.TRITON_HTTP_PORT, upstream.TRITON_GRPC_PORT}
    assert not own_ports & (triton_ports | {upstream.TRITON_METRICS_PORT})
    assert f"--grpc-port={upstream.TRITON_GRPC_PORT}" in command
    assert f"--http-port={upstream.TRITON_HTTP_PORT}" in command
    # Only the metrics port is in the pod's ports (its loopback ones are nobody's to reach).
    assert [p["name"] for p in triton["ports"]] == ["triton-metrics"]
    assert triton["env"] == [{"name": "CUDA_MODULE_LOADING", "value": "LAZY"}]

    # The GPUs and the resources go to Triton, none to cachefleet.
    assert triton["resources"]["limits"] == {"memory": "16Gi", "nvidia.com/gpu": 2}
    assert triton["resources"]["requests"] == {"cpu": "2", "memory": "8Gi"}
    assert "nvidia.com/gpu" not in server["resources"].get("limits", {})
    # A surge pod would need GPUs beyond the replicas' own.
    strategy = one(children, "Deployment")["spec"]["strategy"]
    assert strategy["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}

    # Both see the same files: the claim's subPath, read-only, at the same path.
    [server_models] = [m for m in server["volumeMounts"] if m["name"] == "models"]
    [triton_models] = [m for m in triton["volumeMounts"] if m["name"] == "models"]
    assert server_models == triton_models == {
        "name": "models", "mountPath": "/models", "readOnly": True, "subPath": "r"
    }  # fmt: skip

    # cachefleet: upstream mode on Triton's loopback gRPC, fingerprinting the shared files, on
    # the Service's ports with its usual probes (a longer startup: Triton loads models first).
    assert "--model-repository" not in server["command"]
    assert {p["containerPort"] for p in server["ports"]} == own_ports
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["startupProbe"]["failureThreshold"] == upstream.STARTUP_FAILURES
    settings = loaded_by_the_runtime(children, tmp_path, environ={})
    assert settings.upstream.url == f"grpc://127.0.0.1:{upstream.TRITON_GRPC_PORT}"
    assert settings.upstream.model_repository == Path("/models")
    assert settings.models.repository is None
    shared = settings.model_copy(
        update={"upstream": settings.upstream.model_copy(update={"model_repository": tmp_path})}
    )
    check_startup(shared)  # the runtime's own refusals (--model-repository beside --upstream)

    # Metrics of both: cachefleet's on the annotated port, Triton's on a named Service port.
    ports = {p["name"]: p for p in runtime_service(children)["spec"]["ports"]}
    assert ports["triton-metrics"]["port"] == upstream.TRITON_METRICS_PORT
    annotations = one(children, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(RUNTIME_PORT)
    assert (
        "triton-tmp" in annotations["cluster-autoscaler.kubernetes.io/safe-to-evict-local-volumes"]
    )


def test_an_external_server_gets_cachefleet_alone_and_its_token_only_by_reference(
    tmp_path: Path,
) -> None:
    children = render(EXTERNAL)
    pod = one(children, "Deployment")["spec"]["template"]["spec"]
    assert list(containers(children)) == ["server"]
    server = containers(children)["server"]
    # No model files of ours: no volume, no copy or download, no mount.
    assert "models" not in {v["name"] for v in pod["volumes"]}
    assert "initContainers" not in pod
    assert "models" not in {m["name"] for m in server["volumeMounts"]}
    assert "triton-metrics" not in json.dumps(runtime_service(children))

    [auth] = [e for e in server["env"] if e["name"] == upstream.AUTH_ENV]
    assert auth == {"name": upstream.AUTH_ENV, "valueFrom": {"secretKeyRef": TOKEN_SECRET}}
    # The Secret is named only there: never in arguments, never in a ConfigMap.
    for child in children:
        text = json.dumps(child).replace(json.dumps(auth), "")
        assert "triton-token" not in text, child["kind"]

    environ = {upstream.AUTH_ENV: "Bearer s3cr3t"}
    settings = loaded_by_the_runtime(children, tmp_path, environ)
    assert settings.upstream.url == "grpcs://triton.inference.svc:8001"
    assert settings.upstream.auth_header == "authorization"  # the default header, as sent
    assert settings.upstream.auth_value.get_secret_value() == "Bearer s3cr3t"
    assert settings.upstream.model_repository is None
    assert settings.models.repository is None
    check_startup(settings)


CA_BUNDLE = {"name": "upstream-ca", "key": "bundle.pem"}


def test_a_private_ca_is_mounted_read_only_and_named_to_the_runtime(tmp_path: Path) -> None:
    spec = copy.deepcopy(EXTERNAL)
    spec["server"]["tls"] = {"caConfigMapRef": CA_BUNDLE}
    children = render(spec)
    pod = one(children, "Deployment")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == upstream.CA_VOLUME]
    assert volume["configMap"]["name"] == "upstream-ca"
    assert volume["configMap"]["items"] == [{"key": "bundle.pem", "path": "ca.crt"}]
    server = containers(children)["server"]
    [mount] = [m for m in server["volumeMounts"] if m["name"] == upstream.CA_VOLUME]
    assert mount == {"name": upstream.CA_VOLUME, "mountPath": upstream.CA_DIR, "readOnly": True}

    settings = loaded_by_the_runtime(children, tmp_path, {upstream.AUTH_ENV: "Bearer s3cr3t"})
    assert settings.upstream.tls_ca_file == Path(upstream.CA_DIR, "ca.crt")
    # The runtime's own start checks pass on that file where the mount puts it.
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    check_startup(
        settings.model_copy(
            update={"upstream": settings.upstream.model_copy(update={"tls_ca_file": ca})}
        )
    )
    # The key's default is the one trust-manager and cert-manager write.
    spec["server"]["tls"] = {"caConfigMapRef": {"name": "upstream-ca"}}
    [volume] = [v for v in one(render(spec), "Deployment")["spec"]["template"]["spec"]["volumes"]
                if v["name"] == upstream.CA_VOLUME]  # fmt: skip
    assert volume["configMap"]["items"] == [{"key": "ca.crt", "path": "ca.crt"}]


def test_without_a_private_ca_nothing_is_mounted_for_it() -> None:
    for spec in (TRITON, EXTERNAL):
        children = render(spec)
        assert upstream.CA_VOLUME not in json.dumps(children)
        assert "--upstream-tls-ca-file" not in containers(children)["server"]["command"]


def test_without_a_server_the_runtime_pods_are_todays() -> None:
    children = render({"model": TRITON["model"]})
    assert list(containers(children)) == ["server"]
    assert containers(children)["server"]["command"][-2:] == ["--model-repository", "/models"]
    assert runtime_config(children)["models"] == {"repository": "/models"}


#: (spec change, the message both the CRD and the operator give).
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "triton without an image": (
        {"server": {"kind": "triton"}},
        "server kind triton needs server.image",
    ),
    "external without a url": (
        {"model": {"name": "m"}, "server": {"kind": "external"}},
        "server kind external needs server.url",
    ),
    "triton without model files": (
        {"model": {"name": "m"}, "server": {"kind": "triton", "image": "t"}},
        "set exactly one of model.storageUri or model.repository",
    ),
    "external beside model files": (
        {"server": {"kind": "external", "url": "grpc://t:8001"}},
        "server kind external serves the external server's models",
    ),
    "GPUs on cachefleet's container": (
        {"server": {"kind": "triton", "image": "t"}, "runtime": {"gpus": 1}},
        "runtime.gpus must be 0 with a server",
    ),
    "a url on triton": (
        {"server": {"kind": "triton", "image": "t", "url": "grpc://t:8001"}},
        "read for server kind external only",
    ),
    "triton fields on external": (
        {"model": {"name": "m"}, "server": {"kind": "external", "url": "grpc://t:8001", "gpus": 1}},
        "read for server kind triton only",
    ),
    "an auth header without its Secret": (
        {
            "model": {"name": "m"},
            "server": {"kind": "external", "url": "grpc://t:8001", "authHeader": "x-token"},
        },
        "server.authHeader is read only with server.authSecretRef",
    ),
    "a CA for triton": (
        {"server": {"kind": "triton", "image": "t", "tls": {"caConfigMapRef": {"name": "ca"}}}},
        "read for server kind external only",
    ),
    "a CA for a plain url": (
        {
            "model": {"name": "m"},
            "server": {
                "kind": "external",
                "url": "grpc://t:8001",
                "tls": {"caConfigMapRef": {"name": "ca"}},
            },
        },
        "server.tls needs a grpcs:// or https:// server.url",
    ),
    "args taking the operator's ports": (
        {"server": {"kind": "triton", "image": "t", "args": ["--grpc-port=8001"]}},
        "server.args must not set --",
    ),
}
BASE_MODEL = {"model": {"name": "m", "repository": {"pvc": {"claimName": "a"}}}}


def service(change: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": "x"},
        "spec": {**copy.deepcopy(BASE_MODEL), **copy.deepcopy(change)},
    }


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_bad_combinations_are_refused_by_the_crd_and_the_operator_alike(case: str) -> None:
    change, message = REFUSED[case]
    failures = cel_failures(service(change))
    assert any(message.split(" --")[0] in failure for failure in failures), failures
    with pytest.raises(SpecError, match=message.split(" --")[0]):
        parse_spec(service(change)["spec"])


@pytest.mark.parametrize(
    "url", ["triton:8001", "grpc://triton", "grpc://u:p@triton:8001", "tcp://t:1", "http://t:80/v2"]
)
def test_a_url_the_runtime_could_not_use_is_refused_by_the_schema(url: str) -> None:
    obj = service({"model": {"name": "m"}, "server": {"kind": "external", "url": url}})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(apply_defaults(schema(), obj), to_json_schema(schema()))
    with pytest.raises(SpecError, match=r"server\.url"):
        parse_spec(obj["spec"])


def test_the_server_examples_are_accepted_and_render_both_kinds() -> None:
    kinds = {}
    for path in EXAMPLES:
        body = yaml.safe_load(path.read_text())
        if "server" not in body["spec"]:
            continue
        stored = apply_defaults(schema(), body)
        jsonschema.validate(stored, to_json_schema(schema()))
        assert cel_failures(stored) == []
        kinds[path.stem] = body["spec"]["server"]["kind"]
        render(stored["spec"])
    assert kinds == {"triton-upstream": "triton", "external-upstream": "external"}
