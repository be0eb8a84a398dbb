"""Only the rendering that leaves the pods' ids to the platform passes OpenShift's restricted-v2
SCC (its rule in ``api_rules``).

Kept as a fast test of a hand-written rule because no server here can produce the case: the SCC
admission is OpenShift's, not kube-apiserver's. That both renderings meet the Pod Security
"restricted" standard is seen on the real server's PodSecurity admission instead: every example
(fixed ids, the default) in a namespace enforcing "restricted"
(``tests/cluster/test_cluster_examples.py``) and a fleet with ``userIds: platform``
(``tests/cluster/test_cluster_platform.py``)."""

from __future__ import annotations

import copy
from typing import Any

import kubernetes_validate
import pytest
from support.kube.api_rules import scc_restricted_v2_refusals

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.operator.reconcile.settings import OperatorSettings

KUBERNETES_VERSION = "1.32"
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
#: A namespace's range as OpenShift assigns it (openshift.io/sa.scc.uid-range: 1000680000/10000).
NAMESPACE_RANGE = range(1000680000, 1000690000)
BASE: dict[str, Any] = {
    "model": {"name": "m", "repository": {"image": {"image": "registry.example.com/m:1"}}},
}


def pods(extra: dict[str, Any], **options: Any) -> dict[str, dict[str, Any]]:
    spec = parse_spec({**copy.deepcopy(BASE), **extra})
    children = build_children(spec, owner=OWNER, redis_password="pw", cache_secret="mac", **options)
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    return {
        c["kind"]: c["spec"]["template"]["spec"]
        for c in children
        if c["kind"] in ("Deployment", "StatefulSet")
    }


@pytest.mark.parametrize(
    ("extra", "options"),
    [({"userIds": "platform"}, {}), ({}, {"user_ids": "platform"})],
    ids=["spec", "operator"],
)
def test_platform_ids_pass_openshifts_restricted_v2(
    extra: dict[str, Any], options: dict[str, Any]
) -> None:
    for kind, pod in pods(extra, **options).items():
        assert scc_restricted_v2_refusals(pod, NAMESPACE_RANGE) == [], kind
        assert pod["securityContext"]["runAsNonRoot"] is True


def test_fixed_ids_are_what_restricted_v2_refuses_and_the_spec_wins_over_the_operator() -> None:
    for pod in pods({}).values():
        assert scc_restricted_v2_refusals(pod, NAMESPACE_RANGE)
    for pod in pods({"userIds": "fixed"}, user_ids="platform").values():
        assert scc_restricted_v2_refusals(pod, NAMESPACE_RANGE)


def test_the_operator_reads_its_mode_from_the_environment() -> None:
    assert OperatorSettings.from_environ({}).user_ids == "fixed"
    environ = {"CACHEFLEET_OPERATOR_USER_IDS": "platform"}
    assert OperatorSettings.from_environ(environ).user_ids == "platform"
    with pytest.raises(ValueError, match="fixed or platform"):
        OperatorSettings.from_environ({"CACHEFLEET_OPERATOR_USER_IDS": "openshift"})
