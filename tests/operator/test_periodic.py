"""The operator's periodic task: resync and cache figures without kopf timers (no finalizer).

The passes run against the emulator without kopf where a test needs to control what the watches
see (a child deleted while nothing watched), and inside the running operator to show that the
startup handler starts the task over kopf's index of the watched services.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import (
    CIS_PATH,
    NS,
    Api,
    cis,
    eventually,
    live,
    must,
    runtime_pod,
    service,
)
from support.processes import free_port

from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings
from harness.chaos.answers import served_fingerprint

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator
pytestmark = pytest.mark.timeout(120)

DEPLOYMENT = "apps/v1/deployments"
LOCAL_ONLY = {"mode": "local"}


def periodic(**settings: Any) -> Periodic:
    import kubernetes

    # The emulator's, as kopf's login would.
    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Periodic(Reconciler(Kube(), OperatorSettings(**settings)), KeyedLocks())


def status_writes(cluster: Cluster, name: str) -> int:
    path = f"{CIS_PATH}/{name}/status"
    return sum(1 for request in cluster["patch"] if request.url.path == path)


async def test_a_resync_restores_a_child_no_watch_saw_go_and_writes_status_once(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY))
    passes = periodic()
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    assert live(cluster, DEPLOYMENT, "svc") is not None
    assert must(cis(cluster, "svc"))["status"]["conditions"]
    assert status_writes(cluster, "svc") == 1

    # Deleted while no operator watched: only the resync can bring it back.
    await api.send("DELETE", f"/apis/apps/v1/namespaces/{NS}/deployments/svc")
    assert live(cluster, DEPLOYMENT, "svc") is None
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    assert live(cluster, DEPLOYMENT, "svc") is not None
    assert status_writes(cluster, "svc") == 1  # the status did not change: not written again


async def test_one_failing_service_does_not_stop_the_others(cluster: Cluster, api: Api) -> None:
    await api.send("POST", CIS_PATH, service("good", cache=LOCAL_ONLY))
    broken: dict[str, Any] = {"kind": "CachedInferenceService"}  # no metadata: every job raises

    def snapshot() -> list[Any]:
        return [broken, cis(cluster, "good")]

    passes = periodic(resync_interval_s=0.2, cache_figures_interval_s=0.2)
    task = asyncio.create_task(passes.run(snapshot))
    try:
        await eventually(lambda: live(cluster, DEPLOYMENT, "good"), "the good service resynced")
        assert not task.done()  # the broken one was logged, and the loop goes on
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_cancelled_pass_lets_the_event_loop_go_while_a_service_is_still_running() -> None:
    """Cancelling the periodic task (the operator stops) must not block the event loop until the
    passes' threads finish: a service's API calls may need that very loop (or time out)."""
    running, release, finished = threading.Event(), threading.Event(), threading.Event()

    def job(body: Any) -> None:
        running.set()
        release.wait(5)
        finished.set()

    passes = Periodic(Reconciler(Kube(), OperatorSettings(periodic_workers=1)), KeyedLocks())
    task = asyncio.create_task(passes.run_pass(job, [{"metadata": {"name": n}} for n in "ab"]))
    await asyncio.to_thread(running.wait, 10)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    waited = finished.is_set()
    release.set()
    assert not waited, "the cancel waited for the running service"


async def test_cache_figures_are_written_when_they_change_and_not_while_idle(
    cluster: Cluster, api: Api, make_redis: Callable[..., Any]
) -> None:
    redis = make_redis()
    no_auth = {"redis": {"auth": {"enabled": False}}}
    await api.send("POST", CIS_PATH, service("svc", cache=no_auth))
    passes = periodic(
        redis_address=f"127.0.0.1:{redis.port}",
        redis_timeout_s=1.0,
        cache_figures_write_interval_s=0.0,  # (test_api_load holds the write interval)
    )

    async def refresh() -> None:
        await asyncio.to_thread(passes.refresh_figures, must(cis(cluster, "svc")))

    await refresh()
    assert must(cis(cluster, "svc"))["status"]["cache"]["usedMemoryBytes"] > 0
    assert status_writes(cluster, "svc") == 1
    await refresh()  # (Redis's first INFO grows its own used_memory a little: one more write)
    figures = must(cis(cluster, "svc"))["status"]["cache"]
    writes = status_writes(cluster, "svc")
    for _ in range(3):
        await refresh()
    assert status_writes(cluster, "svc") == writes  # an idle Redis: same figures, no write

    redis.client().set("key", b"x" * 100_000)
    await refresh()
    assert status_writes(cluster, "svc") == writes + 1
    assert (
        must(cis(cluster, "svc"))["status"]["cache"]["usedMemoryBytes"] > figures["usedMemoryBytes"]
    )


async def test_the_running_operator_resyncs_the_services_it_watches(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "0.3")
    await start_operator()
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY))
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"

    def applies() -> int:
        return sum(1 for r in cluster["patch"] if r.url.path == path and "fieldManager" in r.params)

    await eventually(lambda: applies() >= 1, "the first apply")
    first = applies()
    # Nothing changes, yet the Deployment is applied again: the periodic resync found the
    # service in kopf's index of watched services.
    await eventually(lambda: applies() >= first + 2, "resync applies")
    assert not must(cis(cluster, "svc"))["metadata"].get("finalizers")


async def test_the_status_lists_what_each_ready_replica_serves(
    cluster: Cluster, api: Api, make_server: Callable[..., Any]
) -> None:
    server = make_server("--cache", "local")
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY))
    pods = f"/api/v1/namespaces/{NS}/pods"
    await api.send("POST", pods, runtime_pod("svc-a", server.port))
    await api.send("POST", pods, runtime_pod("svc-b", free_port()))  # ready, but not answering
    await api.send("POST", pods, runtime_pod("svc-c", server.port, ready=False))
    passes = periodic(redis_timeout_s=1.0)
    await asyncio.to_thread(passes.refresh_served, must(cis(cluster, "svc")))
    fingerprint = served_fingerprint(server.base_url)
    assert must(cis(cluster, "svc"))["status"]["served"] == [
        {"pod": "svc-a", "fingerprint": fingerprint},
        {"pod": "svc-b", "fingerprint": ""},
    ]
    writes = status_writes(cluster, "svc")
    await asyncio.to_thread(passes.refresh_served, must(cis(cluster, "svc")))
    assert status_writes(cluster, "svc") == writes  # unchanged: not written again


async def test_the_generated_cache_secret_is_made_once_and_kept(cluster: Cluster, api: Api) -> None:
    await api.send("POST", CIS_PATH, service("svc"))  # tiered, managed Redis
    passes = periodic()
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    first = must(live(cluster, "v1/secrets", "svc-fleet"))["data"]["cache-secret"]
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    assert must(live(cluster, "v1/secrets", "svc-fleet"))["data"]["cache-secret"] == first
    container = must(live(cluster, DEPLOYMENT, "svc"))["spec"]["template"]["spec"]["containers"][0]
    env = {item["name"]: item.get("valueFrom") for item in container["env"]}
    assert env["CACHEFLEET_CACHE_SECRET"] == {
        "secretKeyRef": {"name": "svc-fleet", "key": "cache-secret"}
    }
