"""What the operator's fast tests assume of an API server (``harness/kube_emulator.py`` plays
it there), asked of the real kube-apiserver: server-assigned metadata, applies that create (and
applies pinned to a uid that do not), JSON-patch tests, no-op writes, ownerReferences under
server-side apply, immutable ConfigMaps, label selectors on lists and watches, and watches
resumed from a resourceVersion.

Each test sends the requests the operator (or kopf) sends, over plain HTTP as the admin, so the
content types and bodies are exactly the ones the emulator's rules were written for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import yaml
from support.plane import ROOT, Plane, until

from harness.kube_emulator import RESOURCES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
NAMESPACE = "server-rules"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture(scope="module")
def api(plane: Plane) -> Iterator[httpx.Client]:
    plane.kubectl("create", "namespace", NAMESPACE)
    # Pods need the namespace's default ServiceAccount, which a controller makes shortly after.
    account = ("get", "serviceaccount/default", "-n", NAMESPACE)
    until(lambda: plane.kubectl(*account, check=False).returncode == 0, "the ServiceAccount")
    with plane.http() as client:
        yield client  # (the namespace is deleted at the module's end: ``nothing_left_behind``)


def _send(
    api: httpx.Client, method: str, path: str, body: Any, content_type: str = MERGE, **params: str
) -> httpx.Response:
    """A request with ``body``: a create (POST) as JSON, a PATCH as ``content_type``."""
    kind = "application/json" if method == "POST" else content_type
    return api.request(method, path, content=json.dumps(body), params=params,
                       headers={"Content-Type": kind})  # fmt: skip


def _ok(response: httpx.Response) -> dict[str, Any]:
    assert response.is_success, response.text
    found: dict[str, Any] = response.json()
    return found


def _configmap(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def _events(api: httpx.Client, path: str, since: str, **params: str) -> list[dict[str, Any]]:
    """Every watch event after ``since`` (the server closes the watch after two seconds)."""
    query = {"watch": "1", "resourceVersion": since, "timeoutSeconds": "2", **params}
    with api.stream("GET", path, params=query) as response:
        assert response.is_success
        return [json.loads(line) for line in response.iter_lines() if line]


def test_a_create_gets_its_metadata_from_the_server(api: httpx.Client) -> None:
    """uid, creationTimestamp and resourceVersion are the server's; the namespace comes from the
    URL; generateName gets a suffix; a generation only where the kind keeps one (not on a
    ConfigMap: the emulator gave every object generation 1)."""
    made = _ok(_send(api, "POST", CONFIGMAPS, _configmap("stamped")))["metadata"]
    assert made["namespace"] == NAMESPACE
    assert made["uid"]
    assert made["creationTimestamp"]
    assert made["resourceVersion"].isdigit()
    assert "generation" not in made
    generated = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-"}}
    named = _ok(_send(api, "POST", CONFIGMAPS, generated))["metadata"]["name"]
    assert named.startswith("gen-")
    assert len(named) == len("gen-") + 5
    taken = _send(api, "POST", CONFIGMAPS, _configmap("stamped"))
    assert taken.status_code == 409


def test_a_server_side_apply_creates_a_missing_object_and_a_repeat_is_a_no_op(
    api: httpx.Client,
) -> None:
    body = _configmap("applied", a="1")
    first = _send(api, "PATCH", f"{CONFIGMAPS}/applied", body, APPLY, fieldManager="tests")
    assert first.status_code == 201, first.text
    version = first.json()["metadata"]["resourceVersion"]
    again = _ok(_send(api, "PATCH", f"{CONFIGMAPS}/applied", body, APPLY, fieldManager="tests"))
    assert again["metadata"]["resourceVersion"] == version
    merged = _ok(_send(api, "PATCH", f"{CONFIGMAPS}/applied", {"data": {"a": "1"}}))
    assert merged["metadata"]["resourceVersion"] == version
    # Neither no-op made a watch event; the next real change does.
    changed = _ok(_send(api, "PATCH", f"{CONFIGMAPS}/applied", {"data": {"a": "2"}}))
    events = _events(api, CONFIGMAPS, version, fieldSelector="metadata.name=applied")
    assert [(e["type"], e["object"]["data"]) for e in events] == [("MODIFIED", {"a": "2"})]
    assert (
        events[0]["object"]["metadata"]["resourceVersion"] == changed["metadata"]["resourceVersion"]
    )


def test_an_apply_naming_a_uid_applies_to_that_object_only(api: httpx.Client) -> None:
    """The operator's apply of a generated password's Secret names the uid it read the password
    from (``passwords.pin_password_secret``): the server must refuse it once that Secret is gone
    (409) or another one holds its name (422 on ``metadata.uid``), never create it anew. Forced,
    as the operator's applies are."""
    path = f"{CONFIGMAPS}/pinned"
    made = _ok(_send(api, "POST", CONFIGMAPS, _configmap("pinned", a="1")))
    uid = made["metadata"]["uid"]
    pinned = {**_configmap("pinned", a="1"), "metadata": {"name": "pinned", "uid": uid}}
    assert _send(api, "PATCH", path, pinned, APPLY, fieldManager="tests", force="true").is_success
    _ok(api.delete(path))

    gone = _send(api, "PATCH", path, pinned, APPLY, fieldManager="tests", force="true")
    assert gone.status_code == 409, gone.text
    assert "uid mismatch" in gone.json()["message"]
    assert api.get(path).status_code == 404
    _ok(_send(api, "POST", CONFIGMAPS, _configmap("pinned", a="2")))
    replaced = _send(api, "PATCH", path, pinned, APPLY, fieldManager="tests", force="true")
    assert replaced.status_code == 422, replaced.text
    causes = replaced.json()["details"]["causes"]
    assert {c["field"] for c in causes} == {"metadata.uid"}
    assert _ok(api.get(path))["data"] == {"a": "2"}


def test_a_failed_json_patch_test_is_refused_with_422(api: httpx.Client) -> None:
    _ok(_send(api, "POST", CONFIGMAPS, _configmap("tested", a="1")))
    operations = [{"op": "test", "path": "/data/a", "value": "other"},
                  {"op": "replace", "path": "/data/a", "value": "2"}]  # fmt: skip
    refused = _send(api, "PATCH", f"{CONFIGMAPS}/tested", operations, JSON_PATCH)
    assert refused.status_code == 422, refused.text
    operations[0]["value"] = "1"
    assert _ok(_send(api, "PATCH", f"{CONFIGMAPS}/tested", operations, JSON_PATCH))["data"] == {
        "a": "2"
    }


def test_the_generation_moves_with_the_spec_only(api: httpx.Client, plane: Plane) -> None:
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
    labels = {"app": "gen"}
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gen"},
        "spec": {"replicas": 0, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/c"}]}}},
    }  # fmt: skip
    assert _ok(_send(api, "POST", path, deployment))["metadata"]["generation"] == 1
    labelled = _ok(_send(api, "PATCH", f"{path}/gen", {"metadata": {"labels": {"x": "y"}}}))
    assert labelled["metadata"]["generation"] == 1
    status = {"status": {"observedGeneration": 1}}
    written = _ok(_send(api, "PATCH", f"{path}/gen/status", status))
    assert written["metadata"]["generation"] == 1
    scaled = _ok(_send(api, "PATCH", f"{path}/gen", {"spec": {"replicas": 1}}))
    assert scaled["metadata"]["generation"] == 2


_LABELS = {"app": "kinds"}
_POD = {"containers": [{"name": "c", "image": "example.invalid/c"}]}
_WORKLOAD = {"replicas": 0, "selector": {"matchLabels": _LABELS},
             "template": {"metadata": {"labels": _LABELS}, "spec": _POD}}  # fmt: skip
#: A minimal body of each kind the emulator serves (KEDA's ScaledObject is left out: the plane
#: has no KEDA, and a custom resource keeps a generation as the CachedInferenceService does).
_BODIES: dict[str, dict[str, Any]] = {
    "v1/namespaces": {},
    "v1/events": {"involvedObject": {"kind": "ConfigMap", "name": "x", "namespace": NAMESPACE},
                  "reason": "Checked", "message": "m", "type": "Normal"},
    "v1/secrets": {},
    "v1/configmaps": {},
    "v1/services": {"spec": {"ports": [{"port": 80}]}},
    "v1/pods": {"spec": _POD},
    "apps/v1/statefulsets": {"spec": {**_WORKLOAD, "serviceName": "kinds"}},
    "apps/v1/deployments": {"spec": _WORKLOAD},
    "apps/v1/replicasets": {"spec": _WORKLOAD},
    "policy/v1/poddisruptionbudgets": {"spec": {"minAvailable": 1,
                                                "selector": {"matchLabels": _LABELS}}},
    "networking.k8s.io/v1/networkpolicies": {"spec": {"podSelector": {}}},
    "autoscaling/v2/horizontalpodautoscalers": {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "kinds"},
        "minReplicas": 1, "maxReplicas": 2}},
}  # fmt: skip


def _collection(resource: str) -> str:
    """The collection's URL path of an emulator resource key (``group/version/plural``)."""
    *group_version, plural = resource.split("/")
    prefix = "/api/" if len(group_version) == 1 else "/apis/"
    if not RESOURCES[resource].get("namespaced", True):
        return f"{prefix}{'/'.join(group_version)}/{plural}"
    return f"{prefix}{'/'.join(group_version)}/namespaces/{NAMESPACE}/{plural}"


def test_the_kinds_that_keep_a_generation_are_the_ones_the_emulator_gives_one(
    api: httpx.Client, installed: Plane
) -> None:
    service = yaml.safe_load((ROOT / "examples" / "simple-cpu.yaml").read_text())
    bodies = {**_BODIES, "cachefleet.io/v1alpha1/cachedinferenceservices": service}
    assert set(bodies) == set(RESOURCES) - {"keda.sh/v1alpha1/scaledobjects"}
    kept = {}
    for resource, body in bodies.items():
        kind = RESOURCES[resource]["kind"]
        made = {**body, "kind": kind, "metadata": {"name": "kinds-generation"}}
        made["apiVersion"] = resource.rsplit("/", 1)[0]
        kept[resource] = (
            "generation" in _ok(_send(api, "POST", _collection(resource), made))["metadata"]
        )
    assert kept == {r: bool(RESOURCES[r].get("generation")) for r in bodies}
    api.delete(f"{_collection('v1/namespaces')}/kinds-generation")


def _owner(name: str, uid: str, *, controller: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid,
            "controller": controller}  # fmt: skip


def test_applied_owner_references_merge_by_uid_and_two_controllers_are_refused(
    api: httpx.Client,
) -> None:
    owners = [_ok(_send(api, "POST", CONFIGMAPS, _configmap(f"owner-{i}"))) for i in range(3)]
    uids = [o["metadata"]["uid"] for o in owners]

    def apply(manager: str, *references: dict[str, Any]) -> httpx.Response:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owned", "ownerReferences": list(references)},
        }
        return _send(api, "PATCH", f"{CONFIGMAPS}/owned", body, APPLY, fieldManager=manager)

    _ok(apply("first", _owner("owner-0", uids[0], controller=True)))
    merged = _ok(apply("second", _owner("owner-1", uids[1], controller=False)))
    kept = {r["uid"] for r in merged["metadata"]["ownerReferences"]}
    assert kept == {uids[0], uids[1]}  # each manager keeps its own entries
    refused = apply("third", _owner("owner-2", uids[2], controller=True))
    assert refused.status_code == 422, refused.text
    assert "Only one reference can have Controller set to true" in refused.text
    two = [_owner("owner-0", uids[0], controller=True), _owner("owner-2", uids[2], controller=True)]
    body = {**_configmap("two"), "metadata": {"name": "two", "ownerReferences": two}}
    also = _send(api, "POST", CONFIGMAPS, body)
    assert also.status_code == 422, also.text


def test_an_immutable_configmap_refuses_a_change_of_its_data(api: httpx.Client) -> None:
    body = {**_configmap("frozen", a="1"), "immutable": True}
    _ok(_send(api, "POST", CONFIGMAPS, body))
    refused = _send(api, "PATCH", f"{CONFIGMAPS}/frozen", {"data": {"a": "2"}})
    assert refused.status_code == 422, refused.text
    assert "field is immutable when `immutable` is set" in refused.text
    thawed = _send(api, "PATCH", f"{CONFIGMAPS}/frozen", {"immutable": False})
    assert thawed.status_code == 422, thawed.text
    # Its metadata stays writable.
    _ok(_send(api, "PATCH", f"{CONFIGMAPS}/frozen", {"metadata": {"labels": {"x": "y"}}}))


def test_label_selectors_filter_lists_and_watches(api: httpx.Client) -> None:
    since = _ok(api.get(CONFIGMAPS))["metadata"]["resourceVersion"]
    for name, labels in {"sel-a": {"tier": "a", "keep": ""}, "sel-b": {"tier": "b"},
                         "sel-c": {}}.items():  # fmt: skip
        body = _configmap(name)
        body["metadata"]["labels"] = labels
        _ok(_send(api, "POST", CONFIGMAPS, body))

    def selected(selector: str) -> set[str]:
        listing = _ok(api.get(CONFIGMAPS, params={"labelSelector": selector}))
        return {i["metadata"]["name"] for i in listing["items"]} & {"sel-a", "sel-b", "sel-c"}

    assert selected("tier=a") == selected("tier==a") == {"sel-a"}
    assert selected("tier!=a") == {"sel-b", "sel-c"}
    assert selected("tier") == {"sel-a", "sel-b"}
    assert selected("!tier") == {"sel-c"}
    assert selected("tier,keep") == {"sel-a"}
    # Set-based terms work on a real server (the emulator refuses them with 400).
    assert selected("tier in (a,b)") == {"sel-a", "sel-b"}
    assert selected("tier notin (a)") == {"sel-b", "sel-c"}
    # A watch from a resourceVersion sees only what the selector selects, and only what came
    # after that version.
    events = _events(api, CONFIGMAPS, since, labelSelector="tier=b")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "sel-b")]
