"""A renewed certificate reaches the runtime: the operator rolls the pods when the content of
their TLS Secret changes (cert-manager rewrites it in place), and never otherwise.

The runtime reads its certificate once, at start. The periodic resync reads the Secret and puts
a digest of what the pods read from it into the pod template: the apply requests the operator
sends are checked here, and the Deployment they carry against the real Kubernetes schema.
"""

from __future__ import annotations

import json

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, must, service
from support.kube.resync import b64, pod_annotations, resync
from support.kube.validation import validate_child

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION
from cachefleet.operator.manifests.tls import TLS_HASH_ANNOTATION

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

SECRETS = f"/api/v1/namespaces/{NS}/secrets"
LOCAL_ONLY = {"mode": "local"}


async def test_a_renewed_certificate_rolls_the_runtime_and_nothing_else_about_the_secret_does(
    cluster: Cluster, api: Api
) -> None:
    data = {"tls.crt": b64("certificate one"), "tls.key": b64("key one")}
    tls = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
           "metadata": {"name": "svc-tls"}, "data": data}  # fmt: skip
    await api.send("POST", SECRETS, tls)
    runtime = {"tls": {"secretName": "svc-tls"}}
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY, runtime=runtime))

    first = await resync("svc", cluster)
    validate_child(first)
    assert must(cis(cluster, "svc"))["status"]["url"] == f"https://svc.{NS}.svc:8000"
    digest = pod_annotations(first)[TLS_HASH_ANNOTATION]
    assert len(digest) == 16
    assert set(digest) <= set("0123456789abcdef")
    sent = json.dumps(first)
    assert not any(value in sent for value in data.values())  # a digest, never the material

    # cert-manager's own bookkeeping and a key the pods do not read: no rollout.
    unrelated = {"metadata": {"labels": {"controller.cert-manager.io/fao": "true"},
                              "annotations": {"cert-manager.io/revision": "2"}},
                 "data": {"keystore.p12": b64("other")}}  # fmt: skip
    await api.send("PATCH", f"{SECRETS}/svc-tls", unrelated, patch=True)
    same = await resync("svc", cluster)
    assert pod_annotations(same)[TLS_HASH_ANNOTATION] == digest
    assert (
        same["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
        == (first["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])
    )

    # The renewal: a new certificate and key in place.
    renewed = {"data": {"tls.crt": b64("certificate two"), "tls.key": b64("key two")}}
    await api.send("PATCH", f"{SECRETS}/svc-tls", renewed, patch=True)
    rolled = await resync("svc", cluster)
    validate_child(rolled)
    assert pod_annotations(rolled)[TLS_HASH_ANNOTATION] != digest
    assert (
        rolled["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]
        != (first["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION])
    )


async def test_a_fleet_without_tls_gets_no_digest_and_an_http_url(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("plain", cache=LOCAL_ONLY))
    assert TLS_HASH_ANNOTATION not in pod_annotations(await resync("plain", cluster))
    assert must(cis(cluster, "plain"))["status"]["url"] == f"http://plain.{NS}.svc:8000"
