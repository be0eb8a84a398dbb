"""Fixtures and helpers for running the operator against the kmock emulator, shared by modules.

A module imports the fixtures it uses by name. They live here rather than in a conftest.py: a
second ``conftest`` module in a folder without ``__init__.py`` would replace ``tests/conftest.py``
under the name ``conftest``, which tests import helpers from.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from cachefleet.operator.manifests.meta import Owner, selector_labels
from harness.kube_emulator import served
from support.kube.cluster import Cluster

NS = "ml"
CIS = "cachefleet.io/v1alpha1/cachedinferenceservices"
CIS_PATH = f"/apis/cachefleet.io/v1alpha1/namespaces/{NS}/cachedinferenceservices"


def service(name: str, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "replicas": 2,
        "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
    }
    body.update(spec)
    return {
        "apiVersion": "cachefleet.io/v1alpha1",
        "kind": "CachedInferenceService",
        "metadata": {"name": name, "namespace": NS},
        "spec": body,
    }


class Api:
    """The test's own client: plain HTTP, like kubectl."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session

    async def send(self, method: str, path: str, body: Any = None, patch: bool = False) -> Any:
        headers = {"Content-Type": "application/merge-patch+json"} if patch else {}
        async with self.session.request(method, path, json=body, headers=headers) as response:
            assert response.status < 300, await response.text()
            return await response.json()


@contextlib.asynccontextmanager
async def serving(
    emulator: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Cluster]:
    """Serve ``emulator`` on loopback and point the Kubernetes client (and kopf) at it."""
    import kubernetes.config.kube_config

    async with served(emulator, tmp_path) as (_, kubeconfig):
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.setattr(
            kubernetes.config.kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig)
        )
        yield emulator


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    async with serving(Cluster(), tmp_path, monkeypatch) as emulator:
        yield emulator


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(base_url=str(cluster.url)) as session:
        yield Api(session)


class OperatorThreads:
    """The operator threads a test started; ``alive`` says whether kopf is still running."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []

    @property
    def alive(self) -> bool:
        return bool(self.threads) and all(thread.is_alive() for thread in self.threads)


@pytest.fixture
def operator_threads() -> OperatorThreads:
    return OperatorThreads()


@pytest.fixture
async def start_operator(
    cluster: Cluster, operator_threads: OperatorThreads
) -> AsyncIterator[Callable[[], Any]]:
    """Start the operator in a thread with its own event loop; kmock serves from the test's."""
    import kopf

    import cachefleet.operator.handlers  # noqa: F401  (registers the handlers)

    stop = threading.Event()
    threads = operator_threads.threads

    async def start() -> None:
        ready = threading.Event()
        settings = kopf.OperatorSettings()
        operator = functools.partial(
            kopf.operator,
            clusterwide=True, standalone=True, stop_flag=stop, ready_flag=ready, settings=settings,
        )  # fmt: skip
        thread = threading.Thread(target=lambda: asyncio.run(operator()), daemon=True)
        thread.start()
        threads.append(thread)
        assert await asyncio.to_thread(ready.wait, 30), "the operator did not start"

    yield start
    stop.set()
    for thread in threads:
        await asyncio.to_thread(thread.join, 30)


@pytest.fixture
async def operator(start_operator: Callable[[], Any]) -> None:
    await start_operator()


def live(cluster: Cluster, resource: str, name: str, namespace: str = NS) -> dict[str, Any] | None:
    try:
        obj = cluster.objects[resource, namespace, name]
    except KeyError:
        return None
    return None if obj.deleted else dict(obj.raw)


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 40) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        result = check()
        if result:
            return result
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def must(value: dict[str, Any] | None) -> dict[str, Any]:
    assert value is not None
    return value


def runtime_config(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The runtime ConfigMap the fleet's live Deployment mounts (named by its content)."""
    deployment = live(cluster, "apps/v1/deployments", name)
    volumes = (deployment or {}).get("spec", {}).get("template", {}).get("spec", {}).get("volumes")
    names = [v["configMap"]["name"] for v in volumes or [] if v["name"] == "config"]
    return live(cluster, "v1/configmaps", names[0]) if names else None


def cis(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return live(cluster, CIS, name)


def condition(body: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    conditions = ((body or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), None)


def runtime_pod(
    name: str, port: int, *, ready: bool = True, owner: str = "svc", ip: str = "127.0.0.1"
) -> dict[str, Any]:
    """A runtime pod of ``owner`` as the kubelet reports it, at ``ip``:``port``."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "labels": selector_labels(Owner(owner, NS), "runtime")},
        "spec": {"containers": [{"name": "server", "image": "x",
                                 "ports": [{"name": "http", "containerPort": port}]}]},
        "status": {"podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }  # fmt: skip
