"""The fleet Secret (``<name>-fleet``): lost, brought by another controller, shared, rotated.

The reconciler runs against the emulator, which refuses (as a real API server does) an object
left with two controller owner references, and merges an apply's ownerReferences by uid as
server-side apply does; the tests also assert the requests the operator sends.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, live, must, service
from support.kube.validation import validate_child

from cachefleet.operator.manifests.meta import CONFIG_HASH_ANNOTATION, MANAGER
from cachefleet.operator.reconcile.fleet_secret import REGENERATE, REGENERATE_ANNOTATION
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Outcome, Reconciler, restore_child
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

SECRETS = "v1/secrets"
SECRETS_PATH = f"/api/v1/namespaces/{NS}/secrets"
DEPLOYMENT = "apps/v1/deployments"
EXTERNAL_SECRET = {
    "apiVersion": "external-secrets.io/v1",
    "kind": "ExternalSecret",
    "name": "svc-fleet",
    "uid": "6f1c2a4e-0000-4000-8000-000000000001",
    "controller": True,
    "blockOwnerDeletion": True,
}


def reconciler() -> Reconciler:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Reconciler(Kube(), OperatorSettings())


async def reconcile(cluster: Cluster, name: str = "svc") -> Outcome:
    return await asyncio.to_thread(reconciler().reconcile, must(cis(cluster, name)))


def pod_hash(cluster: Cluster, name: str = "svc") -> str:
    deployment = must(live(cluster, DEPLOYMENT, name))
    return str(deployment["spec"]["template"]["metadata"]["annotations"][CONFIG_HASH_ANNOTATION])


def encoded(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def secret_applies(cluster: Cluster, name: str) -> list[Any]:
    path = f"{SECRETS_PATH}/{name}"
    return [r for r in cluster if r.method == "PATCH" and r.url.path == path]


async def deleted_fleet_secret(cluster: Cluster, api: Api) -> tuple[dict[str, str], str]:
    """A reconciled service whose fleet Secret was then deleted: the Secret's data as it was,
    and the config hash its pods rolled with."""
    await api.send("POST", CIS_PATH, service("svc"))
    await reconcile(cluster)
    before = must(live(cluster, SECRETS, "svc-fleet"))["data"]
    rolled_from = pod_hash(cluster)
    assert set(before) == {"cache-secret", "admin-token"}
    await api.send("DELETE", f"{SECRETS_PATH}/svc-fleet")
    return before, rolled_from


async def test_a_deleted_fleet_secret_is_not_regenerated_unasked(
    cluster: Cluster, api: Api
) -> None:
    before, rolled_from = await deleted_fleet_secret(cluster, api)
    outcome = await reconcile(cluster)
    # What a user sees: Stalled with the cause and the way out; no new keys, no rollout.
    stalled = must(condition({"status": outcome.status}, "Stalled"))
    assert (stalled["status"], stalled["reason"]) == ("True", "FleetSecretMissing")
    assert REGENERATE_ANNOTATION in stalled["message"]
    assert [(e.warning, e.reason) for e in outcome.events] == [(True, "FleetSecretMissing")]
    assert live(cluster, SECRETS, "svc-fleet") is None
    assert pod_hash(cluster) == rolled_from
    # The watch's restore of the deleted child does not invent keys either.
    written = await asyncio.to_thread(
        restore_child, reconciler(), must(cis(cluster, "svc")), "Secret", "svc-fleet"
    )
    assert written == []
    assert live(cluster, SECRETS, "svc-fleet") is None
    said = must(condition(cis(cluster, "svc"), "Stalled"))  # on the service at once
    assert (said["status"], said["reason"]) == ("True", "FleetSecretMissing")

    # Restored from a backup: the same keys, nothing rolls, Ready again.
    backup = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "svc-fleet"},
              "data": before}  # fmt: skip
    await api.send("POST", SECRETS_PATH, backup)
    outcome = await reconcile(cluster)
    assert must(condition({"status": outcome.status}, "Stalled"))["status"] == "False"
    assert pod_hash(cluster) == rolled_from


async def test_the_regenerate_annotation_accepts_new_keys_and_rolls_the_fleet(
    cluster: Cluster, api: Api
) -> None:
    before, rolled_from = await deleted_fleet_secret(cluster, api)
    annotate = {"metadata": {"annotations": {REGENERATE_ANNOTATION: REGENERATE}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", annotate, patch=True)
    outcome = await reconcile(cluster)
    assert must(condition({"status": outcome.status}, "Stalled"))["status"] == "False"
    after = must(live(cluster, SECRETS, "svc-fleet"))["data"]
    assert set(after) == set(before)
    assert all(after[key] != before[key] for key in before)
    assert pod_hash(cluster) != rolled_from


async def test_a_key_no_pod_reads_yet_is_generated_into_the_existing_secret(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", runtime={"restrictedApis": []}))
    await reconcile(cluster)
    assert set(must(live(cluster, SECRETS, "svc-fleet"))["data"]) == {"cache-secret"}
    cache_secret = must(live(cluster, SECRETS, "svc-fleet"))["data"]["cache-secret"]
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"runtime": None}}, patch=True)
    outcome = await reconcile(cluster)
    assert must(condition({"status": outcome.status}, "Stalled"))["status"] == "False"
    data = must(live(cluster, SECRETS, "svc-fleet"))["data"]
    assert data["cache-secret"] == cache_secret  # the key the pods read is kept
    assert "admin-token" in data


async def test_a_fleet_secret_brought_by_external_secrets_is_read_and_never_applied(
    cluster: Cluster, api: Api
) -> None:
    data = {"cache-secret": encoded("from-the-vault-1"), "admin-token": encoded("token-1")}
    brought = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "svc-fleet", "ownerReferences": [EXTERNAL_SECRET]},
        "data": data,
    }
    await api.send("POST", SECRETS_PATH, brought)
    await api.send("POST", CIS_PATH, service("svc"))
    outcome = await reconcile(cluster)
    # The old code applied it with a second controller reference: a real API server (and now
    # the emulator) refuses that with 422, and the service stalled.
    assert outcome.retry is None
    assert must(condition({"status": outcome.status}, "Stalled"))["status"] == "False"
    assert secret_applies(cluster, "svc-fleet") == []
    secret = must(live(cluster, SECRETS, "svc-fleet"))
    assert secret["metadata"]["ownerReferences"] == [EXTERNAL_SECRET]
    assert secret["data"] == data
    deployment = must(live(cluster, DEPLOYMENT, "svc"))
    assert "svc-fleet" in json.dumps(deployment["spec"]["template"]["spec"]["containers"])

    # The external controller rotates the key: the pods roll with it.
    rolled_from = pod_hash(cluster)
    rotated = {"data": {"cache-secret": encoded("from-the-vault-2")}}
    await api.send("PATCH", f"{SECRETS_PATH}/svc-fleet", rotated, patch=True)
    await reconcile(cluster)
    assert pod_hash(cluster) != rolled_from


async def test_a_foreign_fleet_secret_missing_a_key_stalls_without_writing_into_it(
    cluster: Cluster, api: Api
) -> None:
    brought = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "svc-fleet", "ownerReferences": [EXTERNAL_SECRET]},
        "data": {"cache-secret": encoded("from-the-vault")},
    }
    await api.send("POST", SECRETS_PATH, brought)
    await api.send("POST", CIS_PATH, service("svc"))
    outcome = await reconcile(cluster)
    stalled = must(condition({"status": outcome.status}, "Stalled"))
    assert (stalled["status"], stalled["reason"]) == ("True", "FleetSecretIncomplete")
    assert "admin-token" in stalled["message"]
    assert secret_applies(cluster, "svc-fleet") == []


async def test_a_shared_secret_outlives_its_maker_and_rolls_every_reader(
    cluster: Cluster, api: Api
) -> None:
    shared = {"namespace": "team/shared", "secretRef": {"name": "maker-fleet"}}
    await api.send("POST", CIS_PATH, service("maker", cache={"namespace": "team/shared"}))
    await api.send("POST", CIS_PATH, service("reader", cache=shared))
    await reconcile(cluster, "maker")
    await reconcile(cluster, "reader")
    maker_uid = must(cis(cluster, "maker"))["metadata"]["uid"]
    reader_uid = must(cis(cluster, "reader"))["metadata"]["uid"]

    # The reader adds itself as a second, non-controller owner under its own field manager.
    shares = [r for r in secret_applies(cluster, "maker-fleet")
              if r.params["fieldManager"] != MANAGER]  # fmt: skip
    assert shares, "the reader sent no owner reference"
    assert shares[-1].params["fieldManager"] == f"{MANAGER}-share-{reader_uid}"
    sent = json.loads(shares[-1].body)  # as sent (the emulator merges into ``data``)
    validate_child(sent)  # a real API server's schema takes the partial apply
    assert sent["metadata"]["ownerReferences"] == [
        {"apiVersion": "cachefleet.io/v1alpha1", "kind": "CachedInferenceService",
         "name": "reader", "uid": reader_uid}
    ]  # fmt: skip
    await reconcile(cluster, "maker")  # the maker's own apply keeps the reader's reference
    references = must(live(cluster, SECRETS, "maker-fleet"))["metadata"]["ownerReferences"]
    assert {r["uid"]: bool(r.get("controller")) for r in references} == {
        maker_uid: True,
        reader_uid: False,
    }

    # The Secret rotates: both fleets roll, and no annotation carries the key.
    maker_from, reader_from = pod_hash(cluster, "maker"), pod_hash(cluster, "reader")
    new_key = "rotated-by-the-platform-team"
    await api.send(
        "PATCH", f"{SECRETS_PATH}/maker-fleet", {"data": {"cache-secret": encoded(new_key)}},
        patch=True,
    )  # fmt: skip
    await reconcile(cluster, "maker")
    await reconcile(cluster, "reader")
    assert pod_hash(cluster, "maker") != maker_from
    assert pod_hash(cluster, "reader") != reader_from
    for name in ("maker", "reader"):
        rendered = json.dumps(must(live(cluster, DEPLOYMENT, name)))
        assert new_key not in rendered
        assert encoded(new_key) not in rendered


async def test_a_users_own_secret_named_in_secret_ref_gets_no_owner_reference(
    cluster: Cluster, api: Api
) -> None:
    own = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "team-key"},
           "data": {"cache-secret": encoded("team")}}  # fmt: skip
    await api.send("POST", SECRETS_PATH, own)
    await api.send("POST", CIS_PATH, service("svc", cache={"secretRef": {"name": "team-key"}}))
    await reconcile(cluster)
    assert secret_applies(cluster, "team-key") == []
    assert not must(live(cluster, SECRETS, "team-key"))["metadata"].get("ownerReferences")
