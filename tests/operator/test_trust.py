"""Who may do what: the operator's allow-lists of images and ServiceAccounts, and the tenant-named
Redis hosts it dials from its own network position."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, Api, cis, condition, live, must, service
from support.kube.validation import validate_child

from cachefleet.operator.reconcile.admission import image_allowed
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Outcome, Reconciler, restore_child
from cachefleet.operator.reconcile.redis_live import RedisLiveError
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

REGISTRY = "registry.example.com/ml/"
ALLOWED: dict[str, Any] = {
    "runtime": {"image": f"{REGISTRY}cachefleet:1.0", "serviceAccountName": "inference"},
    "cache": {"redis": {"image": f"{REGISTRY}redis:7.4-alpine"}},
}
MODEL_IMAGE = {
    "name": "simple",
    "repository": {"image": {"image": "registry.example.com/mlx/models:1", "path": "/models"}},
}
POLICY = OperatorSettings(
    allowed_images=(REGISTRY,), allowed_service_accounts=("inference", "default")
)


def reconciler(settings: OperatorSettings = POLICY) -> Reconciler:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Reconciler(Kube(), settings)


async def reconcile(cluster: Cluster, settings: OperatorSettings = POLICY) -> Outcome:
    return await asyncio.to_thread(reconciler(settings).reconcile, must(cis(cluster, "svc")))


def writes(cluster: Cluster) -> list[Any]:
    """Requests that would create or change a child (everything but the service's status)."""
    return [
        r for r in cluster
        if r.method in ("POST", "PATCH", "PUT") and not r.url.path.startswith(CIS_PATH)
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "named"),
    [
        ({"runtime": {"image": "docker.io/someone/miner:1"}}, "image docker.io/someone/miner:1"),
        ({"runtime": {"image": f"{REGISTRY}cachefleet:1.0"}}, "image redis:7.4-alpine"),
        (
            {**ALLOWED, "runtime": {**ALLOWED["runtime"], "serviceAccountName": "ci-deployer"}},
            "ServiceAccount ci-deployer",
        ),
        ({**ALLOWED, "model": MODEL_IMAGE}, "image registry.example.com/mlx/models:1"),
    ],
    ids=["runtime-image", "default-redis-image", "service-account", "model-image"],
)
async def test_a_service_outside_the_allow_lists_is_refused_and_nothing_is_applied(
    cluster: Cluster, api: Api, spec: dict[str, Any], named: str
) -> None:
    await api.send("POST", CIS_PATH, service("svc", **spec))
    before = len(writes(cluster))
    outcome = await reconcile(cluster)
    stalled = must(condition({"status": outcome.status}, "Stalled"))
    ready = must(condition({"status": outcome.status}, "Ready"))
    assert (stalled["status"], stalled["reason"]) == ("True", "NotAllowed")
    assert (ready["status"], ready["reason"]) == ("False", "NotAllowed")
    assert named in stalled["message"]
    assert [(e.warning, e.reason) for e in outcome.events] == [(True, "NotAllowed")]
    assert writes(cluster)[before:] == []  # nothing rendered into the cluster
    assert live(cluster, "apps/v1/deployments", "svc") is None
    # A watch restoring a "deleted child" goes through the same check.
    restored = await asyncio.to_thread(
        restore_child, reconciler(), must(cis(cluster, "svc")), "Deployment", "svc"
    )
    assert restored == []
    assert live(cluster, "apps/v1/deployments", "svc") is None


async def test_a_service_inside_the_allow_lists_is_applied(cluster: Cluster, api: Api) -> None:
    await api.send("POST", CIS_PATH, service("svc", **ALLOWED))
    outcome = await reconcile(cluster)
    assert must(condition({"status": outcome.status}, "Stalled"))["status"] == "False"
    deployment = must(live(cluster, "apps/v1/deployments", "svc"))
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "inference"
    validate_child(deployment)


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("ghcr.io/acme/x:1", True),
        ("ghcr.io/acme:1", True),
        ("ghcr.io/acme@sha256:00", True),
        ("ghcr.io/acmex/x:1", False),
        ("ghcr.io.evil.com/acme/x:1", False),
        ("registry.example.com/ml/x", True),
        ("registry.example.com/mlx", False),
        ("mirror.example.com/x:1", True),
        ("mirror.example.comx/x:1", False),
        # Short names are Docker Hub's, as the container runtime reads them.
        ("redis:7.4-alpine", True),
        ("docker.io/library/redis:7", True),
        ("evil.example.com/library/redis:7", False),
        ("someone/redis:7", False),
    ],
)
def test_images_match_a_registry_or_repository_not_a_longer_name(image: str, allowed: bool) -> None:
    entries = ["ghcr.io/acme", "registry.example.com/ml/", "mirror.example.com", "redis"]
    assert image_allowed(image, entries) is allowed


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that counts who dials it (a stand-in for a tenant-named host)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def dialled(sock: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize("mode", ["cluster", "sentinel"])
async def test_the_operator_dials_no_tenant_redis_host_unless_allowed(
    cluster: Cluster, api: Api, listener: socket.socket, mode: str
) -> None:
    url = f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    external: dict[str, Any] = {"mode": mode, "url": url}
    if mode == "sentinel":
        external["sentinelMaster"] = "mymaster"
    await api.send("POST", CIS_PATH, service("svc", cache={"redis": {"external": external}}))
    body = must(cis(cluster, "svc"))
    figures = await asyncio.to_thread(reconciler(OperatorSettings()).cache_figures, body)
    assert figures is None
    assert dialled(listener) == 0
    elsewhere = OperatorSettings(external_redis_hosts=("*.redis.example.com",), redis_timeout_s=0.5)
    with pytest.raises(RedisLiveError, match=r"may not dial 127\.0\.0\.1"):
        await asyncio.to_thread(reconciler(elsewhere).cache_figures, body)
    assert dialled(listener) == 0


def test_the_allow_lists_are_read_from_the_environment() -> None:
    settings = OperatorSettings.from_environ({
        "CACHEFLEET_OPERATOR_ALLOWED_IMAGES": "registry.example.com/ml/, ghcr.io/acme",
        "CACHEFLEET_OPERATOR_ALLOWED_SERVICE_ACCOUNTS": "default,inference",
        "CACHEFLEET_OPERATOR_EXTERNAL_REDIS_HOSTS": "*.redis.example.com",
    })  # fmt: skip
    assert settings.allowed_images == ("registry.example.com/ml/", "ghcr.io/acme")
    assert settings.allowed_service_accounts == ("default", "inference")
    assert settings.external_redis_hosts == ("*.redis.example.com",)
    assert OperatorSettings.from_environ({}).allowed_images == ()
