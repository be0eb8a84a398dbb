"""kopf's record of the last handled spec is the same whether kopf or the lean builder makes it:
an operator upgraded onto the lean one sees no change in any service (no update reconcile for
every service at the upgrade), and a real change is still one."""

from __future__ import annotations

import copy
from typing import Any, cast

import kopf
import pytest

from cachefleet.operator.diff_base import LeanAnnotationsDiffBaseStorage
from cachefleet.operator.manifests.meta import GROUP

SPEC = {"replicas": 2, "model": {"name": "simple", "repository": {"pvc": {"claimName": "m"}}}}


def as_body(raw: dict[str, Any]) -> kopf.Body:
    return kopf.Body(cast(kopf.RawBody, raw))


def service(**extra: Any) -> dict[str, Any]:
    """A service as a watch brings it, with what kopf drops and what it keeps."""
    body: dict[str, Any] = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {
            "name": "svc", "namespace": "ml", "uid": "u-1", "generation": 3,
            "resourceVersion": "812", "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "vision"},
            "annotations": {
                "owner": "ml-platform",
                "kubectl.kubernetes.io/last-applied-configuration": '{"spec": {}}',
                f"{GROUP}/last-handled-configuration": '{"spec": {"replicas": 1}}\n',
            },
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
        },
        "spec": copy.deepcopy(SPEC),
        "status": {"conditions": [{"type": "Ready", "status": "True"}], "replicas": 2},
    }  # fmt: skip
    body.update(extra)
    return body


@pytest.mark.parametrize(
    "body",
    [
        service(),
        service(metadata={"name": "svc", "namespace": "ml"}),  # no labels or annotations
        service(status=None),
        service(data={"extra": "top-level field"}),
        service(metadata={"name": "svc", "ownerReferences": [{"kind": "Deployment", "uid": "d"}]}),
    ],
    ids=["full", "bare-metadata", "no-status", "other-top-level", "owned"],
)
def test_the_lean_essence_is_kopfs(body: dict[str, Any]) -> None:
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix=GROUP).build(body=as_body(body))
    lean = LeanAnnotationsDiffBaseStorage(prefix=GROUP).build(body=as_body(body))
    assert lean == kopfs


def test_a_spec_change_changes_the_essence_and_a_status_change_does_not() -> None:
    storage = LeanAnnotationsDiffBaseStorage(prefix=GROUP)
    before = storage.build(body=as_body(service()))
    changed = service(spec={**SPEC, "replicas": 3})
    written = service(status={"conditions": [], "replicas": 0})
    assert storage.build(body=as_body(changed)) != before
    assert storage.build(body=as_body(written)) == before


def test_the_lean_essence_shares_nothing_with_the_body() -> None:
    """kopf keeps the essence while the body moves on: a later change must not reach it."""
    body = service()
    essence = LeanAnnotationsDiffBaseStorage(prefix=GROUP).build(body=as_body(body))
    body["spec"]["model"]["name"] = "changed"
    body["metadata"]["labels"]["team"] = "other"
    assert essence["spec"]["model"]["name"] == "simple"
    assert essence["metadata"]["labels"]["team"] == "vision"
