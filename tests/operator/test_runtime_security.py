"""What the operator gives the runtime pods: restricted admin APIs with a generated token held
only in a Secret, and TLS from a user-named Secret."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import tritonclient.grpc as grpcclient
import yaml
from support import loopback
from support.processes import ServerProcess
from tritonclient.utils import InferenceServerException

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.runtime.config import load_settings

OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
TOKEN = "tok-7a4e1c-generated"
BASE: dict[str, Any] = {
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
    "cache": {"mode": "local"},
}


def render(**runtime: Any) -> list[dict[str, Any]]:
    spec = parse_spec({**BASE, "runtime": runtime})
    return build_children(spec, owner=OWNER, admin_token=TOKEN)


def one(children: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [found] = [child for child in children if child["kind"] == kind]
    return found


def container(children: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(children, "Deployment")
    return dict(deployment["spec"]["template"]["spec"]["containers"][0])


def pod_environment(children: list[dict[str, Any]]) -> dict[str, str]:
    """The server's environment as the kubelet makes it: Secret values read, $(VAR) expanded."""
    secrets = {
        child["metadata"]["name"]: child["data"] for child in children if child["kind"] == "Secret"
    }
    environ: dict[str, str] = {}
    for variable in container(children)["env"]:
        if "valueFrom" in variable:
            ref = variable["valueFrom"]["secretKeyRef"]
            environ[variable["name"]] = base64.b64decode(secrets[ref["name"]][ref["key"]]).decode()
        else:
            environ[variable["name"]] = re.sub(
                r"\$\((\w+)\)", lambda m: environ[m[1]], variable["value"]
            )
    return environ


def test_admin_apis_are_restricted_by_default_with_the_token_only_in_its_secret() -> None:
    children = render()
    secret = one(children, "Secret")
    assert secret["metadata"]["name"] == "svc-fleet"  # the fleet's Secret
    assert base64.b64decode(secret["data"]["admin-token"]).decode() == TOKEN
    for child in children:
        kubernetes_validate.validate(child, "1.32", strict=True)
        if child["kind"] != "Secret":
            assert TOKEN not in json.dumps(child), child["kind"]
    settings = load_settings(None, pod_environment(children))
    for restrictions in (
        settings.security.http_restricted_api,
        settings.security.grpc_restricted_protocol,
    ):
        [restriction] = restrictions
        assert restriction.groups == ("model-repository", "shared-memory", "cache")
        assert restriction.header == "cachefleet-admin-token"
        assert restriction.admits(TOKEN)
    # Health stays open: the kubelet's probes carry no token.
    assert container(children)["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_the_restricted_groups_follow_the_spec_and_none_means_no_token() -> None:
    children = render(restrictedApis=["inference", "statistics"])
    settings = load_settings(None, pod_environment(children))
    assert settings.security.http_restricted_api[0].groups == ("inference", "statistics")
    opened = render(restrictedApis=[])
    assert "Secret" not in [child["kind"] for child in opened]
    assert not any("RESTRICTED" in v["name"] for v in container(opened)["env"])


def test_a_new_token_rolls_the_pods() -> None:
    spec = parse_spec(BASE)
    hashes = {
        token: one(build_children(spec, owner=OWNER, admin_token=token), "Deployment")["spec"][
            "template"
        ]["metadata"]["annotations"]["cachefleet.io/config-hash"]
        for token in ("a", "b")
    }
    assert hashes["a"] != hashes["b"]


@pytest.mark.parametrize("mutual", [False, True])
def test_tls_mounts_the_named_secret_and_serves_both_transports_over_it(mutual: bool) -> None:
    children = render(tls={"secretName": "svc-tls", "mutual": mutual})
    for child in children:
        kubernetes_validate.validate(child, "1.32", strict=True)
    pod = one(children, "Deployment")["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "svc-tls"
    server = container(children)
    [mount] = [m for m in server["volumeMounts"] if m["name"] == "tls"]
    assert mount["readOnly"] is True
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert server[probe]["httpGet"]["scheme"] == "HTTPS"
    config = yaml.safe_load(one(children, "ConfigMap")["data"]["config.yaml"])
    security = config["security"]
    folder = Path(mount["mountPath"])
    assert security["grpc_use_ssl"] is True
    assert security["grpc_server_cert"] == security["ssl_certfile"] == str(folder / "tls.crt")
    assert security["grpc_server_key"] == security["ssl_keyfile"] == str(folder / "tls.key")
    assert security.get("grpc_use_ssl_mutual", False) is mutual
    assert (security.get("grpc_root_cert") == str(folder / "ca.crt")) is mutual


def test_a_server_run_as_the_pod_says_restricts_as_the_operator_meant(
    make_server: Callable[..., ServerProcess], tmp_path: Path
) -> None:
    """The rendered ConfigMap and environment, given to a real server: the admin APIs need
    the token from the Secret, inference and health do not."""
    children = render()
    config = tmp_path / "config.yaml"
    config.write_text(one(children, "ConfigMap")["data"]["config.yaml"])
    server = make_server("--config", str(config), env=pod_environment(children))
    flush = f"{server.base_url}/v2/models/simple/cache/flush"
    refused = loopback.post(flush, timeout=30)
    assert refused.status_code == 403
    assert refused.json() == {
        "error": "This API is restricted, expecting header 'cachefleet-admin-token'"
    }
    assert loopback.post(flush, headers={"cachefleet-admin-token": TOKEN}, timeout=30).is_success
    body = {
        "inputs": [
            {"name": name, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
            for name in ("INPUT0", "INPUT1")
        ]
    }
    assert loopback.post(
        f"{server.base_url}/v2/models/simple/infer", json=body, timeout=30
    ).is_success
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        with pytest.raises(InferenceServerException, match="triton-grpc-protocol-cachefleet"):
            client.get_system_shared_memory_status()
        metadata = {"triton-grpc-protocol-cachefleet-admin-token": TOKEN}
        assert client.get_system_shared_memory_status(headers=metadata) is not None
