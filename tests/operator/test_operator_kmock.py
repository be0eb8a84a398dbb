"""The operator (kopf, real HTTP) against the kmock Kubernetes API emulator.

Behaviour a user sees: children appear with owner references, a resize is applied without
rolling Redis while a persistence change rolls it, deleted or edited children come back, a bad
object gets a condition without stopping the others, and the status is written.
"""

from __future__ import annotations

import asyncio
import base64
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
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
from support.kube.operator_process import operator_process

HASH = "cachefleet.io/config-hash"
pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator, operator

pytestmark = pytest.mark.timeout(120)


def pod_hash(obj: dict[str, Any] | None) -> str | None:
    if obj is None:
        return None
    return str(obj["spec"]["template"]["metadata"]["annotations"].get(HASH))


CHILDREN = {
    "v1/secrets": "svc-redis-auth",
    "v1/configmaps": "svc-redis-config",
    "v1/services": "svc-redis",
    "apps/v1/statefulsets": "svc-redis",
    "policy/v1/poddisruptionbudgets": "svc-redis",
    "networking.k8s.io/v1/networkpolicies": "svc-redis",
    "apps/v1/deployments": "svc",
}


@pytest.mark.usefixtures("operator")
async def test_creating_a_service_creates_owned_children_and_status(
    cluster: Cluster, api: Api
) -> None:
    created = await api.send("POST", CIS_PATH, service("svc"))
    uid = created["metadata"]["uid"]
    for resource, name in CHILDREN.items():
        child = await eventually(functools.partial(live, cluster, resource, name), name)
        [owner] = child["metadata"]["ownerReferences"]
        assert owner["uid"] == uid
        assert owner["controller"] is True
    assert runtime_config(cluster, "svc") is not None
    assert live(cluster, "v1/services", "svc-redis-headless") is not None

    await eventually(lambda: condition(cis(cluster, "svc"), "RuntimeReady"), "the status")
    body = cis(cluster, "svc")
    assert body is not None
    status = body["status"]
    assert status["observedGeneration"] == 1
    assert status["url"] == "http://svc.ml.svc:8000"
    assert status["selector"] == (
        "app.kubernetes.io/name=cachefleet,app.kubernetes.io/instance=svc,"
        "app.kubernetes.io/component=runtime"
    )
    assert must(condition(body, "Ready"))["status"] == "False"  # no pods run in an emulator
    assert must(condition(body, "Stalled"))["status"] == "False"
    assert must(condition(body, "Reconciling"))["status"] == "True"
    applies = [r for r in cluster["patch"] if "fieldManager" in r.params]
    assert applies
    assert all(r.params["fieldManager"] == "cachefleet-operator" for r in applies)
    assert all(r.params["force"] == "true" for r in applies)
    assert all(
        r.headers["Content-Type"].startswith("application/apply-patch+yaml") for r in applies
    )


@pytest.mark.usefixtures("operator")
async def test_resize_updates_config_without_rolling_redis_but_persistence_rolls_it(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"redis": {"maxmemory": "256Mi"}}))
    statefulset = await eventually(
        lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the StatefulSet"
    )
    first_hash = pod_hash(statefulset)

    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": {"redis": {
        "maxmemory": "300Mi", "maxmemoryPolicy": "allkeys-lfu"}}}}, patch=True)  # fmt: skip

    def resized() -> bool:
        configmap = live(cluster, "v1/configmaps", "svc-redis-config") or {"data": {}}
        return "maxmemory 314572800" in configmap["data"].get("redis.conf", "")

    await eventually(resized, "the new maxmemory in the ConfigMap")

    def reconciled_generation_2() -> bool:
        status = must(cis(cluster, "svc")).get("status") or {}
        return bool(status.get("observedGeneration") == 2)

    # The status names generation 2 only once its reconcile applied every child: from then on
    # the StatefulSet is what that generation asked for, and Redis did not roll for it.
    await eventually(reconciled_generation_2, "the reconcile of generation 2 to finish")
    assert pod_hash(live(cluster, "apps/v1/statefulsets", "svc-redis")) == first_hash

    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": {"redis": {
        "persistence": {"mode": "aof", "size": "1Gi"}}}}}, patch=True)  # fmt: skip

    def rolled_statefulset() -> dict[str, Any] | None:
        statefulset = live(cluster, "apps/v1/statefulsets", "svc-redis")
        return statefulset if pod_hash(statefulset) not in (None, first_hash) else None

    rolled = await eventually(rolled_statefulset, "a new Redis pod hash")
    assert rolled["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "1Gi"
    }


async def test_deleted_and_edited_children_are_restored(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "1")  # Secrets are not watched
    await start_operator()
    await api.send("POST", CIS_PATH, service("svc"))
    first = await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
    secret = await eventually(lambda: live(cluster, "v1/secrets", "svc-redis-auth"), "the Secret")

    await api.send("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/svc")

    def recreated() -> dict[str, Any] | None:
        deployment = live(cluster, "apps/v1/deployments", "svc")
        fresh = deployment and deployment["metadata"]["uid"] != first["metadata"]["uid"]
        return deployment if fresh else None

    again = await eventually(recreated, "the Deployment to come back")
    assert again["spec"]["replicas"] == 2

    await api.send("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/svc",
                   {"spec": {"replicas": 7}}, patch=True)  # fmt: skip
    await eventually(
        lambda: must(live(cluster, "apps/v1/deployments", "svc"))["spec"]["replicas"] == 2,
        "the hand-edited replicas to be restored",
    )
    await api.send("DELETE", f"/api/v1/namespaces/{NS}/configmaps/svc-redis-config")
    await eventually(lambda: live(cluster, "v1/configmaps", "svc-redis-config"), "the ConfigMap")
    # The generated password is never regenerated while its Secret exists.
    assert must(live(cluster, "v1/secrets", "svc-redis-auth"))["data"] == secret["data"]

    # A lost password Secret gets a new password at the next resync, and the pods that read
    # it roll.
    redis_hash = pod_hash(live(cluster, "apps/v1/statefulsets", "svc-redis"))
    await api.send("DELETE", f"/api/v1/namespaces/{NS}/secrets/svc-redis-auth")

    def rolled_with_new_password() -> bool:
        statefulset = live(cluster, "apps/v1/statefulsets", "svc-redis")
        return pod_hash(statefulset) not in (None, redis_hash)

    await eventually(rolled_with_new_password, "Redis rolled for the new password")
    renewed = must(live(cluster, "v1/secrets", "svc-redis-auth"))
    assert renewed["data"] != secret["data"]


@pytest.mark.usefixtures("operator")
async def test_a_bad_object_is_stalled_and_the_others_are_still_served(
    cluster: Cluster, api: Api
) -> None:
    too_big = {"redis": {"maxmemory": "8Gi", "resources": {"limits": {"memory": "1Gi"}}}}
    await api.send("POST", CIS_PATH, service("broken", cache=too_big))
    broken = await eventually(lambda: condition(cis(cluster, "broken"), "Stalled"), "Stalled")
    assert broken["status"] == "True"
    assert "does not fit in the Redis memory limit 1Gi" in broken["message"]
    assert "Lower maxmemory" in broken["message"]
    assert live(cluster, "apps/v1/deployments", "broken") is None

    await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the good Deployment")
    assert live(cluster, "apps/v1/statefulsets", "svc-redis") is None

    requests_before = len(cluster)
    await asyncio.sleep(1.0)
    assert len(cluster) - requests_before < 20  # no hot loop on the bad object


async def test_live_config_set_reaches_the_running_redis(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    make_redis: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    redis = make_redis("--maxmemory", "100mb", password="from-secret")
    monkeypatch.setenv("CACHEFLEET_OPERATOR_REDIS_ADDRESS", f"127.0.0.1:{redis.port}")
    monkeypatch.setenv("CACHEFLEET_OPERATOR_CACHE_INTERVAL", "0.5")  # the figures come sooner
    await start_operator()
    password = base64.b64encode(b"from-secret").decode()
    await api.send("POST", f"/api/v1/namespaces/{NS}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-pw"},
        "data": {"password": password},
    })  # fmt: skip
    auth = {"passwordSecretRef": {"name": "redis-pw"}}
    await api.send(
        "POST", CIS_PATH, service("svc", cache={"redis": {"auth": auth, "maxmemory": "64Mi"}})
    )
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the StatefulSet")
    assert live(cluster, "v1/secrets", "svc-redis-auth") is None  # the user's Secret is used
    await api.send("PATCH", f"/apis/apps/v1/namespaces/{NS}/statefulsets/svc-redis/status",
                   {"status": {"readyReplicas": 1, "replicas": 1}}, patch=True)  # fmt: skip

    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"cache": {"redis": {
        "maxmemory": "96Mi", "maxmemoryPolicy": "volatile-ttl"}}}}, patch=True)  # fmt: skip
    client = redis.client()
    # Both, in one wait: the operator sets them one CONFIG SET each (a user's image may be a
    # Redis before 7, which takes one setting per call), so the policy may land a moment later.
    wanted = {"maxmemory": str(96 * 2**20), "maxmemory-policy": "volatile-ttl"}

    def both_set() -> bool:
        current = client.config_get("maxmemory*")
        return all(current.get(name) == value for name, value in wanted.items())

    await eventually(both_set, "maxmemory and its policy set live on redis-server")

    # The status is written when the handler that ran CONFIG SET returns: wait for that write.
    def redis_ready_true() -> dict[str, Any] | None:
        found = condition(cis(cluster, "svc"), "RedisReady")
        return found if found is not None and found["status"] == "True" else None

    redis_ready = await eventually(redis_ready_true, "RedisReady=True")
    assert redis_ready["status"] == "True"
    assert redis_ready["reason"] == "Ready"
    figures = await eventually(
        lambda: ((cis(cluster, "svc") or {}).get("status") or {}).get("cache"), "cache figures"
    )
    assert figures["usedMemoryBytes"] > 0


async def test_an_unreachable_redis_is_a_condition_and_an_event_not_a_crash(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from support.processes import free_port

    monkeypatch.setenv("CACHEFLEET_OPERATOR_REDIS_ADDRESS", f"127.0.0.1:{free_port()}")
    monkeypatch.setenv("CACHEFLEET_OPERATOR_REDIS_TIMEOUT", "0.5")
    await start_operator()
    await api.send("POST", CIS_PATH, service("svc"))
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "svc-redis"), "the StatefulSet")
    status_path = f"/apis/apps/v1/namespaces/{NS}/statefulsets/svc-redis/status"
    await api.send("PATCH", status_path, {"status": {"readyReplicas": 1}}, patch=True)
    await api.send("PATCH", f"{CIS_PATH}/svc", {"spec": {"replicas": 3}}, patch=True)

    def failed() -> dict[str, Any] | None:
        redis_ready = condition(cis(cluster, "svc"), "RedisReady")
        return redis_ready if redis_ready and redis_ready["reason"] == "ConfigSetFailed" else None

    redis_ready = await eventually(failed, "RedisReady=False with ConfigSetFailed")
    assert redis_ready["status"] == "False"
    assert "CONFIG SET on Redis at 127.0.0.1" in redis_ready["message"]
    assert must(condition(cis(cluster, "svc"), "Ready"))["status"] == "False"
    # kopf posts events from its own queue, so the event may land after the status patch.
    events = await eventually(
        lambda: [e for e in cluster.objects.values() if e.get("reason") == "ConfigSetFailed"],
        "a ConfigSetFailed event",
    )
    assert events[0]["type"] == "Warning"
    # The operator is still serving: a new object is reconciled.
    await api.send("POST", CIS_PATH, service("other", cache={"mode": "local"}))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "other"), "the other Deployment")


@pytest.mark.usefixtures("operator")
async def test_a_failing_api_call_is_reported_in_the_status(cluster: Cluster, api: Api) -> None:
    pdbs = kmock.resource("policy", "v1", "poddisruptionbudgets")
    cluster["patch", pdbs] << kmock.KubernetesError(403, "Forbidden", "RBAC says no")
    await api.send("POST", CIS_PATH, service("svc"))

    def failed() -> dict[str, Any] | None:
        ready = condition(cis(cluster, "svc"), "Ready")
        return ready if ready and ready["reason"] == "ReconcileFailed" else None

    ready = await eventually(failed, "Ready=False with ReconcileFailed")
    assert "RBAC says no" in ready["message"]
    assert must(condition(cis(cluster, "svc"), "Reconciling"))["status"] == "True"
    assert must(condition(cis(cluster, "svc"), "Stalled"))["status"] == "False"


async def test_the_operator_command_runs_kopf_with_a_liveness_endpoint(
    cluster: Cluster, api: Api, tmp_path: Path
) -> None:
    from support.processes import free_port

    port = free_port()
    liveness = f"--liveness=http://127.0.0.1:{port}/healthz"
    async with operator_process(tmp_path / "operator.log", liveness):
        await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
        await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/healthz") as response,
        ):
            assert response.status == 200
