"""Upgrades that a running cluster survives: settings a pod reads stay as it was started with,
rollouts are paced across fleets, and a spec that would fail every probe is refused.

Against the emulator: it refuses a change to an immutable ConfigMap as the API server does, and
the tests drive the Deployments' and ReplicaSets' status themselves, as their controllers would.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import (
    CIS_PATH,
    NS,
    Api,
    cis,
    condition,
    eventually,
    live,
    must,
    runtime_config,
    service,
)

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION, selector_labels
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator
pytestmark = pytest.mark.timeout(180)

DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"
REPLICASETS = f"/apis/apps/v1/namespaces/{NS}/replicasets"
CONFIGMAPS = f"/api/v1/namespaces/{NS}/configmaps"
LOCAL = {"mode": "local"}  # no Redis: nothing here needs one


def reconciler() -> Reconciler:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Reconciler(Kube(), OperatorSettings())


async def reconcile(cluster: Cluster, name: str = "svc") -> dict[str, Any]:
    outcome = await asyncio.to_thread(reconciler().reconcile, must(cis(cluster, name)))
    assert outcome.retry is None, outcome.retry
    return outcome.status


def mounted(cluster: Cluster, name: str = "svc") -> str:
    return str(must(runtime_config(cluster, name))["metadata"]["name"])


async def replicaset(api: Api, cluster: Cluster, name: str, replicas: int) -> None:
    """What the Deployment controller makes of the live template: a ReplicaSet with pods."""
    deployment = must(live(cluster, "apps/v1/deployments", "svc"))
    body = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NS, "labels": selector_labels_of("svc")},
        "spec": {"replicas": replicas, "template": deployment["spec"]["template"]},
        "status": {"replicas": replicas},
    }
    await api.send("POST", REPLICASETS, body)


def selector_labels_of(name: str) -> dict[str, str]:
    from cachefleet.operator.manifests.meta import Owner

    return selector_labels(Owner(name, NS), "runtime")


# --- immutable ConfigMaps named by content ----------------------------------------------------


async def test_the_emulator_refuses_a_change_to_an_immutable_configmap(
    cluster: Cluster, api: Api
) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "immutable": True,
            "metadata": {"name": "frozen", "namespace": NS}, "data": {"a": "1"}}  # fmt: skip
    await api.send("POST", CONFIGMAPS, body)
    headers = {"Content-Type": "application/merge-patch+json"}
    async with aiohttp.ClientSession(base_url=str(cluster.url)) as session:
        patch = {"data": {"a": "2"}}
        async with session.patch(f"{CONFIGMAPS}/frozen", json=patch, headers=headers) as answer:
            assert answer.status == 422
            assert "immutable" in await answer.text()
        same = {"data": {"a": "1"}, "metadata": {"labels": {"x": "y"}}}
        async with session.patch(f"{CONFIGMAPS}/frozen", json=same, headers=headers) as answer:
            assert answer.status == 200  # metadata may change; the data may not
    assert must(live(cluster, "v1/configmaps", "frozen"))["data"] == {"a": "1"}


async def test_new_settings_are_a_new_configmap_and_the_old_one_stays_while_pods_run_it(
    cluster: Cluster, api: Api
) -> None:
    created = await api.send("POST", CIS_PATH, service("svc", cache=LOCAL))
    # What the previous release left: a ConfigMap changed in place, owned by the service.
    owner = {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "name": "svc",
        "uid": created["metadata"]["uid"],
        "controller": True,
    }
    labels = {**selector_labels_of("svc"), "app.kubernetes.io/managed-by": "cachefleet-operator"}
    legacy = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"config.yaml": "{}\n"},
              "metadata": {"name": "svc-config", "namespace": NS, "labels": labels,
                           "ownerReferences": [owner]}}  # fmt: skip
    await api.send("POST", CONFIGMAPS, legacy)
    await reconcile(cluster)
    first = mounted(cluster)
    assert first.startswith("svc-config-")
    assert must(live(cluster, "v1/configmaps", first))["immutable"] is True
    assert live(cluster, "v1/configmaps", "svc-config") is None  # no pod mounts it
    settings = must(live(cluster, "v1/configmaps", first))["data"]
    await replicaset(api, cluster, "svc-1", replicas=2)  # pods started with those settings

    change = {"spec": {"runtime": {"logLevel": "debug"}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", change, patch=True)
    await reconcile(cluster)
    second = mounted(cluster)
    assert second != first
    assert "debug" in must(live(cluster, "v1/configmaps", second))["data"]["config.yaml"]
    # An old pod that restarts now still reads the settings it was started with.
    assert must(live(cluster, "v1/configmaps", first))["data"] == settings

    # The rollout is over: the old ReplicaSet has no pods left, and its ConfigMap goes.
    await api.send("PATCH", f"{REPLICASETS}/svc-1", {"spec": {"replicas": 0}}, patch=True)
    await api.send("PATCH", f"{REPLICASETS}/svc-1/status", {"status": {"replicas": 0}}, patch=True)
    await reconcile(cluster)
    assert live(cluster, "v1/configmaps", first) is None
    assert live(cluster, "v1/configmaps", second) is not None

    # Never an apply that would change an immutable ConfigMap's data (a real server refuses it).
    sent: dict[str, list[Any]] = {}
    for request in cluster["patch"]:
        name = request.url.path.rsplit("/", 1)[-1]
        if request.url.path.startswith(CONFIGMAPS) and name.startswith("svc-config-"):
            sent.setdefault(name, []).append(request.data["data"])
    assert set(sent) == {first, second}
    assert all(all(data == datas[0] for data in datas) for datas in sent.values())


async def test_the_resync_deletes_an_old_configmap_once_its_rollout_is_over(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL))
    await reconcile(cluster)
    first = mounted(cluster)
    await replicaset(api, cluster, "svc-1", replicas=2)
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"runtime": {"logLevel": "debug"}}},
                   patch=True)  # fmt: skip
    await reconcile(cluster)  # the spec change: the old ConfigMap stays while its pods run
    second = mounted(cluster)
    assert live(cluster, "v1/configmaps", first) is not None

    # The rollout ends with no change to the spec: only the periodic resync comes by.
    await api.send("PATCH", f"{REPLICASETS}/svc-1", {"spec": {"replicas": 0}}, patch=True)
    await api.send("PATCH", f"{REPLICASETS}/svc-1/status", {"status": {"replicas": 0}}, patch=True)
    passes = Periodic(reconciler(), KeyedLocks())
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    assert live(cluster, "v1/configmaps", first) is None
    assert live(cluster, "v1/configmaps", second) is not None
    # And the resync deletes no other child: the spec asks for all the others.
    deleted = [r.url.path for r in cluster if r.method == "DELETE"]
    assert deleted == [f"{CONFIGMAPS}/{first}"]


# --- restrictedApis ---------------------------------------------------------------------------


async def test_a_service_that_restricts_health_is_not_ready_and_says_why(
    cluster: Cluster, api: Api
) -> None:
    runtime = {"restrictedApis": ["cache", "health"]}  # the CRD refuses it; this got past
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL, runtime=runtime))
    status = {"status": await reconcile(cluster)}
    ready = must(condition(status, "Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "restrictedApis must not hold health" in ready["message"]
    assert live(cluster, "apps/v1/deployments", "svc") is None  # nothing that cannot start


# --- paced rollouts ---------------------------------------------------------------------------


def test_a_queued_fleet_asks_again_every_ten_seconds_unless_told_otherwise() -> None:
    assert OperatorSettings().rollout_retry_interval_s == 10
    environ = {"CACHEFLEET_OPERATOR_ROLLOUT_RETRY_INTERVAL": "1"}
    assert OperatorSettings.from_environ(environ).rollout_retry_interval_s == 1


async def available(api: Api, cluster: Cluster, name: str) -> None:
    """Every replica of the fleet's current template updated and available."""
    deployment = must(live(cluster, "apps/v1/deployments", name))
    replicas = deployment["spec"].get("replicas", 1)
    status = {"observedGeneration": deployment["metadata"]["generation"], "replicas": replicas,
              "updatedReplicas": replicas, "readyReplicas": replicas,
              "availableReplicas": replicas}  # fmt: skip
    await api.send("PATCH", f"{DEPLOYMENTS}/{name}/status", {"status": status}, patch=True)


def template_hash(cluster: Cluster, name: str) -> str | None:
    deployment = live(cluster, "apps/v1/deployments", name)
    return ((deployment or {}).get("metadata", {}).get("annotations") or {}).get(
        TEMPLATE_HASH_ANNOTATION
    )


def queued(cluster: Cluster, name: str, wanted: bool = True) -> bool:
    """Whether the fleet's rollout waits for others (or, with ``wanted`` False, does not)."""
    found = condition(cis(cluster, name), "Reconciling")
    return (found is not None and found["reason"] == "RolloutQueued") == wanted


async def test_a_change_to_every_fleet_rolls_two_at_a_time(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_MAX_CONCURRENT_ROLLOUTS", "2")
    # A queued fleet asks again every second (not 10): the next one starts sooner after a place
    # frees, and the check that no third fleet starts meanwhile sees more of those asks.
    monkeypatch.setenv("CACHEFLEET_OPERATOR_ROLLOUT_RETRY_INTERVAL", "1")
    await start_operator()
    fleets = [f"svc-{i}" for i in range(4)]
    for name in fleets:
        await api.send("POST", CIS_PATH, service(name, cache=LOCAL))
    for name in fleets:  # new fleets are never queued: all four start at once
        await eventually(functools.partial(live, cluster, "apps/v1/deployments", name), name)
        await available(api, cluster, name)
    before = {name: template_hash(cluster, name) for name in fleets}
    old_configs = {name: mounted(cluster, name) for name in fleets}

    def started() -> set[str]:
        return {name for name in fleets if template_hash(cluster, name) != before[name]}

    done: set[str] = set()

    def rolling() -> set[str]:
        return started() - done

    def started_is(count: int) -> bool:
        return len(started()) == count

    for name in fleets:  # a change that rolls every fleet's pods (as an upgrade does)
        change = {"spec": {"runtime": {"logLevel": "debug"}}}
        await api.send("PATCH", f"{CIS_PATH}/{name}", change, patch=True)
    await eventually(lambda: len(started()) == 2, "two fleets rolling")
    waiting = [name for name in fleets if name not in started()]
    for name in waiting:
        await eventually(functools.partial(queued, cluster, name), f"{name} queued")
        # It keeps its pods and their settings, and gets everything else.
        assert mounted(cluster, name) == old_configs[name]
        ready = must(condition(cis(cluster, name), "Reconciling"))
        assert "at most 2 roll at a time" in ready["message"]
    for _ in range(20):  # meanwhile, no third fleet starts
        assert len(rolling()) <= 2
        await asyncio.sleep(0.1)
    assert len(started()) == 2

    # A brand-new service is never queued, even now.
    await api.send("POST", CIS_PATH, service("fresh", cache=LOCAL))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "fresh"), "a new fleet")
    await available(api, cluster, "fresh")

    while len(done) < len(fleets):  # each finished rollout lets the next fleet start
        first = sorted(rolling())[0]
        await available(api, cluster, first)
        done.add(first)
        wanted = min(len(fleets), len(done) + 2)
        await eventually(functools.partial(started_is, wanted), f"{wanted} fleets started")
        assert len(rolling()) <= 2
    for name in fleets:
        assert mounted(cluster, name) != old_configs[name]
        await eventually(functools.partial(queued, cluster, name, False), f"{name} rolled")
