"""A rotated upstream token or a renewed private CA reaches the runtime pods of ``spec.server``.

The runtime reads the auth value and the CA once, at start (``--upstream-auth-file`` is read
once too), so the operator rolls the pods instead: each resync reads the Secret and the
ConfigMap by name and puts a digest of what the pods read from them into the pod template.
Checked here on the apply requests the operator sends (the Deployment against the real
Kubernetes schema): a new token or CA rolls the pods, another key of the same Secret or
ConfigMap does not, and the value itself is in no request but the test's own.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, service
from support.kube.resync import b64, pod_annotations, resync
from support.kube.validation import validate_child

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION
from cachefleet.operator.manifests.upstream import UPSTREAM_HASH_ANNOTATION

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

SECRETS = f"/api/v1/namespaces/{NS}/secrets"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
FIRST_TOKEN = "Bearer first-Zq8vR2mK7pX4wN9t"
SECOND_TOKEN = "Bearer second-Lw3nB6cT9yH2dF5s"
CA_ONE = "-----BEGIN CERTIFICATE-----\nca one\n-----END CERTIFICATE-----\n"
CA_TWO = "-----BEGIN CERTIFICATE-----\nca two\n-----END CERTIFICATE-----\n"


def external(name: str, **server: Any) -> dict[str, Any]:
    body = service(name, cache={"mode": "local"}, model={"name": "densenet_onnx"})
    body["spec"]["server"] = {"kind": "external", "url": "grpcs://triton.ml.svc:8001", **server}
    return body


def template_hash(deployment: dict[str, Any]) -> str:
    return str(deployment["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])


def operator_writes(cluster: Cluster) -> str:
    """Every body and query the operator sent (the test's own writes are POSTs of Secrets and
    ConfigMaps and merge patches of them, which the operator never sends)."""
    sent = [r for r in cluster if r.method in ("POST", "PATCH", "PUT")]
    own = [r for r in sent if "/secrets" not in r.url.path and "/configmaps/upstream" not in
           r.url.path]  # fmt: skip
    return "".join((r.body.decode(errors="replace") if r.body else "") + r.url.query_string
                   for r in own)  # fmt: skip


async def test_a_rotated_token_rolls_the_pods_and_another_key_of_its_secret_does_not(
    cluster: Cluster, api: Api
) -> None:
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "upstream-token"},
             "data": {"token": b64(FIRST_TOKEN), "other": b64("x")}}  # fmt: skip
    await api.send("POST", SECRETS, token)
    ref = {"name": "upstream-token", "key": "token"}
    await api.send("POST", CIS_PATH, external("ext", authSecretRef=ref))

    first = await resync("ext", cluster)
    validate_child(first)
    digest = pod_annotations(first)[UPSTREAM_HASH_ANNOTATION]
    assert len(digest) == 16
    assert set(digest) <= set("0123456789abcdef")

    # Another key of the same Secret, and its metadata: what the pods read is the same.
    unrelated = {"metadata": {"annotations": {"rotated-by": "vault"}},
                 "data": {"other": b64("y")}}  # fmt: skip
    await api.send("PATCH", f"{SECRETS}/upstream-token", unrelated, patch=True)
    same = await resync("ext", cluster)
    assert pod_annotations(same)[UPSTREAM_HASH_ANNOTATION] == digest
    assert template_hash(same) == template_hash(first)

    # The rotation: a new token in place.
    rotated = {"data": {"token": b64(SECOND_TOKEN)}}
    await api.send("PATCH", f"{SECRETS}/upstream-token", rotated, patch=True)
    rolled = await resync("ext", cluster)
    validate_child(rolled)
    assert pod_annotations(rolled)[UPSTREAM_HASH_ANNOTATION] != digest
    assert template_hash(rolled) != template_hash(first)

    # A digest, never the value, in any form, in anything the operator sent.
    sent = operator_writes(cluster)
    assert "upstream-hash" in sent
    for value in (FIRST_TOKEN, SECOND_TOKEN):
        for form in (value, b64(value), json.dumps(value)[1:-1], value.split()[1]):
            assert form not in sent


async def test_a_renewed_ca_bundle_rolls_the_pods_and_another_key_of_its_configmap_does_not(
    cluster: Cluster, api: Api
) -> None:
    bundle = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "upstream-ca"},
              "data": {"ca.crt": CA_ONE, "README": "from trust-manager"}}  # fmt: skip
    await api.send("POST", CONFIGMAPS, bundle)
    await api.send(
        "POST", CIS_PATH, external("tls", tls={"caConfigMapRef": {"name": "upstream-ca"}})
    )

    first = await resync("tls", cluster)
    validate_child(first)
    digest = pod_annotations(first)[UPSTREAM_HASH_ANNOTATION]
    pod = first["spec"]["template"]["spec"]
    assert {"name": "upstream-ca", "configMap": {"name": "upstream-ca", "defaultMode": 0o444,
            "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in pod["volumes"]  # fmt: skip

    await api.send("PATCH", f"{CONFIGMAPS}/upstream-ca", {"data": {"README": "v2"}}, patch=True)
    same = await resync("tls", cluster)
    assert pod_annotations(same)[UPSTREAM_HASH_ANNOTATION] == digest
    assert template_hash(same) == template_hash(first)

    await api.send("PATCH", f"{CONFIGMAPS}/upstream-ca", {"data": {"ca.crt": CA_TWO}}, patch=True)
    rolled = await resync("tls", cluster)
    assert pod_annotations(rolled)[UPSTREAM_HASH_ANNOTATION] != digest
    assert template_hash(rolled) != template_hash(first)


async def test_a_missing_secret_gives_no_digest_until_it_exists_and_no_server_none_at_all(
    cluster: Cluster, api: Api
) -> None:
    ref = {"name": "later", "key": "token"}
    await api.send("POST", CIS_PATH, external("waits", authSecretRef=ref))
    waiting = await resync("waits", cluster)
    validate_child(waiting)
    # The pods cannot start without the Secret: its arrival rolls nothing that runs.
    assert UPSTREAM_HASH_ANNOTATION not in pod_annotations(waiting)
    token = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "later"},
             "data": {"token": b64(FIRST_TOKEN)}}  # fmt: skip
    await api.send("POST", SECRETS, token)
    assert UPSTREAM_HASH_ANNOTATION in pod_annotations(await resync("waits", cluster))

    await api.send("POST", CIS_PATH, service("plain", cache={"mode": "local"}))
    assert UPSTREAM_HASH_ANNOTATION not in pod_annotations(await resync("plain", cluster))
