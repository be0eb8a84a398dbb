"""How the served pass reaches the runtime pods: over TLS, through restrictions, never through a
proxy, many pods at once but no more than its bound, and within its budget per pass.

Real runtime servers (HTTPS with certificates made in the test; a restricted model-config API),
the operator's own passes against the emulator, and silent loopback listeners standing in for
pods that hang and for a proxy that must not be used.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import ssl
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import loopback
from support.certificates import Authority, Issued, make_authority
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, eventually, must, runtime_pod, service
from support.listeners import SilentListener
from support.processes import ServerProcess
from support.tls_servers import https_url, start_https_server

from cachefleet.operator.manifests.meta import Owner, labels
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings
from harness.chaos.answers import served_fingerprint

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(300)

PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
LOCAL_ONLY = {"mode": "local"}
TOKEN = "fleet-admin-token-5d1e"


def periodic(**settings: Any) -> Periodic:
    import kubernetes

    # The emulator's, as kopf's login would.
    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Periodic(Reconciler(Kube(), OperatorSettings(**settings)), KeyedLocks())


def served(cluster: Cluster, name: str) -> Any:
    return (must(cis(cluster, name)).get("status") or {}).get("served")


def secret(name: str, files: dict[str, Path]) -> dict[str, Any]:
    data = {key: base64.b64encode(path.read_bytes()).decode() for key, path in files.items()}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": NS}, "data": data}  # fmt: skip


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("pki")
    ca, rogue = make_authority(folder, "fleet-ca"), make_authority(folder, "rogue-ca")
    return {"ca": ca, "rogue": rogue, "server": ca.issue(folder, "server")}


@pytest.fixture(scope="module")
def https_server(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory, pki: dict[str, Any]
) -> Iterator[ServerProcess]:
    logs = tmp_path_factory.mktemp("https-server")
    server = start_https_server(model_repository, logs, pki["server"], pki["ca"].cert)
    yield server
    server.stop()


async def test_a_tls_fleet_is_asked_over_https_its_certificate_checked_by_the_secrets_ca(
    cluster: Cluster, api: Api, https_server: ServerProcess, pki: dict[str, Any]
) -> None:
    ca: Authority = pki["ca"]
    leaf: Issued = pki["server"]
    context = ssl.create_default_context(cafile=str(ca.cert))
    url = https_url(https_server, "/v2/models/simple/config")
    config = await asyncio.to_thread(httpx.get, url, verify=context)  # noqa: TID251 (TLS test)
    fingerprint = config.json()["parameters"]["cachefleet.fingerprint"]["string_value"]
    keys = {"tls.crt": leaf.cert, "tls.key": leaf.key}
    cases = {
        "signed": {**keys, "ca.crt": ca.cert},  # checked, and it passes
        "no-ca": keys,  # nothing to check against: encrypted, not checked
        "rogue": {**keys, "ca.crt": pki["rogue"].cert},  # a CA that did not sign it
    }
    for name, files in cases.items():
        await api.send("POST", SECRETS, secret(f"{name}-tls", files))
        tls = {"tls": {"secretName": f"{name}-tls"}}
        await api.send("POST", CIS_PATH, service(name, cache=LOCAL_ONLY, runtime=tls))
        await api.send("POST", PODS, runtime_pod(f"{name}-a", https_server.port, owner=name))
    passes = periodic()
    for name in cases:
        await asyncio.to_thread(passes.refresh_served, must(cis(cluster, name)))
    assert served(cluster, "signed") == [{"pod": "signed-a", "fingerprint": fingerprint}]
    assert served(cluster, "no-ca") == [{"pod": "no-ca-a", "fingerprint": fingerprint}]
    assert served(cluster, "rogue") == [{"pod": "rogue-a", "fingerprint": ""}]


async def test_pods_are_never_asked_through_the_operators_proxy(
    cluster: Cluster, api: Api, make_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = make_server("--cache", "local")
    fingerprint = served_fingerprint(server.base_url)  # (before the proxy is set)
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY))
    await api.send("POST", PODS, runtime_pod("svc-a", server.port))
    passes = periodic()
    with SilentListener() as proxy:
        for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
            monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.port}")
        for variable in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(variable, raising=False)
        # urllib's shared opener reads the proxy variables once, when first used: start afresh,
        # as an operator started with HTTPS_PROXY set does (and again after, for other tests).
        urllib.request.install_opener(None)
        try:
            await asyncio.to_thread(passes.refresh_served, must(cis(cluster, "svc")))
        finally:
            urllib.request.install_opener(None)
        assert proxy.accepted == 0
    assert served(cluster, "svc") == [{"pod": "svc-a", "fingerprint": fingerprint}]


async def test_a_restricted_model_config_api_is_asked_with_the_fleets_admin_token(
    cluster: Cluster, api: Api, make_server: Callable[..., Any]
) -> None:
    restriction = f"model-config,model-repository:cachefleet-admin-token={TOKEN}"
    server = make_server("--cache", "local", "--http-restricted-api", restriction)
    fleet = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "svc-fleet"},
             "data": {"admin-token": base64.b64encode(TOKEN.encode()).decode()}}  # fmt: skip
    await api.send("POST", SECRETS, fleet)
    runtime = {"restrictedApis": ["model-config", "model-repository"]}
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY, runtime=runtime))
    await api.send("POST", PODS, runtime_pod("svc-a", server.port))
    await asyncio.to_thread(periodic().refresh_served, must(cis(cluster, "svc")))
    answer = await asyncio.to_thread(  # the test's own view, with the token
        loopback.get,
        f"{server.base_url}/v2/models/simple/config",
        headers={"cachefleet-admin-token": TOKEN},
    )
    fingerprint = answer.json()["parameters"]["cachefleet.fingerprint"]["string_value"]
    assert fingerprint
    assert served(cluster, "svc") == [{"pod": "svc-a", "fingerprint": fingerprint}]


async def _silent_services(api: Api, count: int, pods: int, port: int) -> None:
    for i in range(count):
        await api.send("POST", CIS_PATH, service(f"svc{i}", cache=LOCAL_ONLY))
        for j in range(pods):
            await api.send("POST", PODS, runtime_pod(f"svc{i}-{j}", port, owner=f"svc{i}"))


@pytest.mark.parametrize(("concurrency", "most"), [(64, 10), (4, 4)])
async def test_a_pass_asks_pods_of_many_services_at_once_and_never_more_than_its_bound(
    cluster: Cluster, api: Api, concurrency: int, most: int
) -> None:
    with SilentListener(hold_s=2.0) as pods:
        await _silent_services(api, 5, 2, pods.port)
        passes = periodic(served_concurrency=concurrency, served_timeout_s=30.0)
        visited = [must(cis(cluster, f"svc{i}")) for i in range(5)]
        await passes.run_pass(passes.refresh_served, visited)
        assert pods.accepted == 10
        assert pods.most_open == most  # (one pod at a time, it was 1)
    for i in range(5):
        assert served(cluster, f"svc{i}") == [
            {"pod": f"svc{i}-{j}", "fingerprint": ""} for j in range(2)
        ]


async def test_a_pass_starts_no_service_once_its_budget_is_spent(
    cluster: Cluster, api: Api
) -> None:
    with SilentListener() as pods:
        await _silent_services(api, 3, 1, pods.port)
        passes = periodic(served_concurrency=1, served_timeout_s=4.0, served_pass_budget_s=1.0)
        visited = [must(cis(cluster, f"svc{i}")) for i in range(3)]
        await passes.run_pass(passes.refresh_served, visited)  # returns at the budget
        await eventually(lambda: pods.accepted >= 1, "the first service's pod asked")
        await eventually(lambda: pods.open == 0, "the first service's pod given up")
        assert pods.accepted == 1  # the other two were never started


def _served_writes(cluster: Cluster, name: str) -> int:
    path = f"{CIS_PATH}/{name}/status"
    return sum(
        1
        for request in cluster["patch"]
        if request.url.path == path and "served" in ((request.data or {}).get("status") or {})
    )


def _fleet_pod(name: str, port: int) -> dict[str, Any]:
    """A runtime pod of "svc" with every label its Deployment's template gives (the operator's
    pod watch selects them by the managed-by label)."""
    pod = runtime_pod(name, port)
    pod["metadata"]["labels"] = labels(Owner("svc", NS), "runtime")
    return pod


def _served_passes() -> float:
    from cachefleet.operator.reconcile.metrics import process_metrics

    registry = process_metrics().registry
    name = "cachefleet_operator_periodic_last_pass_timestamp_seconds"
    return registry.get_sample_value(name, {"pass": "refresh_served"}) or 0.0


def _passed(since: float) -> bool:
    return _served_passes() > since


async def test_the_running_operators_served_pass_reads_the_pod_watch_and_lists_no_pods(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    make_server: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Served passes every 0.5 s (the first 0.2 s after start), as the operator runs them.
    monkeypatch.setenv("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "0.5")
    monkeypatch.setenv("CACHEFLEET_OPERATOR_CACHE_INTERVAL", "0.2")
    server = make_server("--cache", "local")
    fingerprint = served_fingerprint(server.base_url)
    await api.send("POST", CIS_PATH, service("svc", cache=LOCAL_ONLY))
    await api.send("POST", PODS, _fleet_pod("svc-a", server.port))
    await start_operator()
    one = [{"pod": "svc-a", "fingerprint": fingerprint}]
    await eventually(lambda: served(cluster, "svc") == one, "svc-a's fingerprint")
    # A pod that becomes ready later reaches the pass through the watch, not a list.
    await api.send("POST", PODS, _fleet_pod("svc-b", server.port))
    two = [*one, {"pod": "svc-b", "fingerprint": fingerprint}]
    await eventually(lambda: served(cluster, "svc") == two, "svc-b's fingerprint")
    writes = _served_writes(cluster, "svc")
    for _ in range(3):  # three more passes over an unchanged fleet
        seen = _served_passes()
        await eventually(functools.partial(_passed, seen), "another served pass")
    assert _served_writes(cluster, "svc") == writes  # unchanged: nothing written
    # kopf's one cluster-wide watch (/api/v1/pods) is the only way pods were read: no pass
    # listed the service's pods (it used to, once per service and pass).
    listed = [r for r in cluster["get"] if r.url.path == PODS]
    assert listed == []
