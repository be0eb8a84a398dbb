"""Status in seconds: a service's conditions follow its workloads and pods, with the cause's own
reason and message, and without a status write when nothing changed.

The pods and workload statuses are what the kubelet and the controllers write on a real cluster;
the test writes them through the API, and the operator sees them through its label-selected
watches (the emulator filters by label selector as the API server does).
"""

from __future__ import annotations

import asyncio
import datetime
import threading
from collections.abc import Callable
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, eventually, live, service

from cachefleet.operator.manifests.meta import MANAGER, Owner, labels
from cachefleet.operator.reconcile import follow, pod_problems
from cachefleet.operator.reconcile.reconciler import Reconciler

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, start_operator, operator
pytestmark = pytest.mark.timeout(120)

PODS = f"/api/v1/namespaces/{NS}/pods"
#: Well inside the old 300 s resync, well outside a refresh (about a second).
WITHIN_S = 30.0
MISSING_SECRET = 'secret "tracing-credentials" not found'
EVICTION = 'Usage of EmptyDir volume "model" exceeds the limit "10Gi". '
NOW = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)


def stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str, component: str = "runtime", created: datetime.datetime | None = None, **status: Any
) -> dict[str, Any]:
    """A fleet's pod as its ReplicaSet or StatefulSet makes it (with the template's labels)."""
    created = created or datetime.datetime.now(datetime.UTC)
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels(Owner("svc", NS), component),
                     "creationTimestamp": stamp(created)},
        "spec": {"containers": [{"name": "server", "image": "x"}]},
        "status": {"phase": "Pending", **status},
    }  # fmt: skip


def waiting(reason: str, message: str, container: str = "server") -> dict[str, Any]:
    return {
        "containerStatuses": [
            {
                "name": container,
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}},
            }
        ]
    }


def evicted(when: datetime.datetime) -> dict[str, Any]:
    return {"phase": "Failed", "reason": "Evicted", "message": EVICTION, "startTime": stamp(when)}


# --- what the pods say -----------------------------------------------------------------------


def test_a_waiting_container_gives_its_reason_and_the_kubelets_message() -> None:
    found = pod_problems.pod_problem(
        "RuntimeReady", [pod("svc-b", **waiting("CreateContainerConfigError", MISSING_SECRET))]
    )
    assert found is not None
    assert (found.type, found.status, found.reason) == (
        "RuntimeReady",
        False,
        "CreateContainerConfigError",
    )
    assert found.message == (
        f"pod svc-b, container server: CreateContainerConfigError: {MISSING_SECRET}"
    )
    starting = pod("svc-a", **waiting("ContainerCreating", ""))
    assert pod_problems.pod_problem("RuntimeReady", [starting]) is None


def test_a_crash_loop_says_the_last_exit_not_the_growing_back_off() -> None:
    status = waiting("CrashLoopBackOff", "back-off 40s restarting failed container=server")
    status["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 2, "reason": "Error", "message": "no model named simple"}
    }
    found = pod_problems.pod_problem("RuntimeReady", [pod("svc-a", **status)])
    assert found is not None
    assert found.message.endswith("CrashLoopBackOff: Error, exit code 2: no model named simple")
    assert "back-off" not in found.message


def test_an_eviction_is_said_once_whichever_pod_it_hit_and_only_while_recent() -> None:
    first = pod_problems.pod_problem("RuntimeReady", [pod("svc-a", "runtime", NOW, **evicted(NOW))],
                                     now=NOW)  # fmt: skip
    later = NOW + datetime.timedelta(minutes=3)
    pods = [
        pod("svc-a", "runtime", NOW, **evicted(NOW)),
        pod("svc-b", "runtime", later, **evicted(later)),
    ]
    again = pod_problems.pod_problem("RuntimeReady", pods, now=later)
    assert first is not None
    assert (first.reason, first.message) == ("Evicted", f"a pod was evicted: {EVICTION.strip()}")
    assert again == first  # the same status: nothing to write
    then = NOW - datetime.timedelta(hours=2)
    old = pod("svc-a", "runtime", then, **evicted(then))
    assert pod_problems.pod_problem("RuntimeReady", [old], now=NOW) is None


def test_pods_going_away_and_finished_pods_are_not_the_present_state() -> None:
    deleting = pod("svc-a", **waiting("ImagePullBackOff", 'Back-off pulling image "x"'))
    deleting["metadata"]["deletionTimestamp"] = stamp(NOW)
    assert pod_problems.pod_problem("RuntimeReady", [deleting]) is None


# --- what moves a service's status, and how often ------------------------------------------


def test_only_a_change_of_the_status_part_marks_the_service() -> None:
    base = pod("svc-a", **waiting("ImagePullBackOff", 'Back-off pulling image "x"'))
    restarted = {**base, "status": {**base["status"]}}
    restarted["status"]["containerStatuses"] = [
        {**base["status"]["containerStatuses"][0], "restartCount": 7, "containerID": "c://1"}
    ]
    annotated = {**base, "metadata": {**base["metadata"], "annotations": {"a": "b"}}}
    assert follow.signature(restarted) == follow.signature(base)
    assert follow.signature(annotated) == follow.signature(base)
    pulled = pod("svc-a", **waiting("ErrImagePull", "401 Unauthorized"))
    assert follow.signature(pulled) != follow.signature(base)
    assert follow.service_of(base) == (NS, "svc")
    foreign = {**base, "metadata": {**base["metadata"], "labels": {"app": "svc"}}}
    assert follow.service_of(foreign) is None


async def test_a_burst_of_changes_is_one_refresh_and_the_initial_listing_none() -> None:
    refreshed: list[follow.ServiceKey] = []
    done = asyncio.Event()

    def refresh(key: follow.ServiceKey) -> None:
        refreshed.append(key)
        done.set()

    follower = follow.Follower(refresh, delay_s=0.2)
    try:
        for index in range(5):  # listed when the watch starts: remembered only
            follower.seen(None, pod(f"svc-{index}"))
        for index in range(5):  # a rollout: every pod moves at once
            follower.seen("MODIFIED", pod(f"svc-{index}", **waiting("ErrImagePull", "denied")))
        await asyncio.wait_for(done.wait(), WITHIN_S)
        follower.seen("MODIFIED", pod("svc-0", **waiting("ErrImagePull", "denied")))  # as before
        # A later change is a refresh of its own (and shows the one above made none).
        done.clear()
        follower.seen("MODIFIED", pod("svc-0", **waiting("ImagePullBackOff", "back-off")))
        await asyncio.wait_for(done.wait(), WITHIN_S)
    finally:
        follower.close()
    assert refreshed == [(NS, "svc"), (NS, "svc")]


# --- the operator against the emulator -------------------------------------------------------


def ready_status() -> dict[str, Any]:
    """What the Deployment controller writes once both pods of the current template are ready."""
    return {"status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                       "readyReplicas": 2, "availableReplicas": 2}}  # fmt: skip


def reason_of(cluster: Cluster, kind: str) -> tuple[str, str, str] | None:
    found = condition(cis(cluster, "svc"), kind)
    return None if found is None else (found["status"], found["reason"], found["message"])


async def create_service(cluster: Cluster, api: Api, **spec: Any) -> None:
    await api.send("POST", CIS_PATH, service("svc", **spec))
    await eventually(lambda: reason_of(cluster, "RuntimeReady"), "the first status")


@pytest.mark.usefixtures("operator")
async def test_ready_follows_the_deployment_within_seconds(cluster: Cluster, api: Api) -> None:
    await create_service(cluster, api, cache={"mode": "local"})
    assert reason_of(cluster, "Ready") == ("False", "Progressing", "0/2 runtime pods ready")
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc"
    reads = len(reads_of(cluster, path))
    await api.send("PATCH", f"{path}/status", ready_status(), patch=True)
    ready = await eventually(
        lambda: (reason_of(cluster, "Ready") or ("",))[0] == "True", "Ready=True", WITHIN_S
    )
    assert ready
    body = cis(cluster, "svc") or {}
    assert (body["status"]["replicas"], body["status"]["readyReplicas"]) == (2, 2)
    # The refresh took the Deployment from the watch that told of it: it read none back.
    assert len(reads_of(cluster, path)) == reads


@pytest.fixture
async def one_handler_worker(
    monkeypatch: pytest.MonkeyPatch, start_operator: Callable[[], Any]
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_HANDLER_WORKERS", "1")
    await start_operator()


@pytest.mark.usefixtures("one_handler_worker")
async def test_status_follows_while_every_handler_worker_is_busy(
    cluster: Cluster, api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of new services holds the handler workers for minutes; the watches of the
    others' workloads and pods must go on (their indexes and event handlers take no worker)."""
    await create_service(cluster, api, cache={"mode": "local"})
    entered, release = threading.Event(), threading.Event()
    reconcile = Reconciler.reconcile

    def held(self: Reconciler, body: Any, **kwargs: Any) -> Any:
        if body["metadata"]["name"] == "held":
            entered.set()
            release.wait(60)
        return reconcile(self, body, **kwargs)

    monkeypatch.setattr(Reconciler, "reconcile", held)
    try:
        await api.send("POST", CIS_PATH, service("held", cache={"mode": "local"}))
        assert await asyncio.to_thread(entered.wait, WITHIN_S), "the held reconcile began"
        path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc/status"
        await api.send("PATCH", path, ready_status(), patch=True)
        ready = await eventually(
            lambda: (reason_of(cluster, "Ready") or ("",))[0] == "True", "Ready=True", WITHIN_S
        )
        assert ready
    finally:
        release.set()


def reads_of(cluster: Cluster, path: str) -> list[Any]:
    return [r for r in cluster["get"] if r.url.path == path]


@pytest.mark.usefixtures("operator")
@pytest.mark.parametrize(
    ("component", "status", "kind", "reason", "says"),
    [
        ("runtime", waiting("CreateContainerConfigError", MISSING_SECRET), "RuntimeReady",
         "CreateContainerConfigError", MISSING_SECRET),
        ("runtime", waiting("ErrImagePull", "pull access denied, repository does not exist"),
         "RuntimeReady", "ErrImagePull", "pull access denied"),
        ("redis", waiting("ImagePullBackOff", 'Back-off pulling image "redis:7"', "redis"),
         "RedisReady", "ImagePullBackOff", 'Back-off pulling image "redis:7"'),
        ("runtime", {"initContainerStatuses": [{
            "name": "fetch-model", "ready": False, "restartCount": 1, "image": "x", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error",
                                         "message": "cannot fetch s3://m/r: NoSuchBucket"}}}]},
         "RuntimeReady", "ModelDownloadFailed", "cannot fetch s3://m/r: NoSuchBucket"),
    ],
    ids=["missing-secret", "image-pull", "redis-image", "download"],
)  # fmt: skip
async def test_a_pod_that_cannot_start_says_why_within_seconds(
    cluster: Cluster,
    api: Api,
    component: str,
    status: dict[str, Any],
    kind: str,
    reason: str,
    says: str,
) -> None:
    await create_service(cluster, api)
    await api.send("POST", PODS, pod(f"svc-{component}-0", component, **status))
    found = await eventually(
        lambda: (reason_of(cluster, kind) or ("", ""))[1] == reason, reason, WITHIN_S
    )
    assert found
    ready = reason_of(cluster, "Ready")
    assert ready is not None
    assert ready[:2] == ("False", reason)
    assert says in ready[2]
    assert (reason_of(cluster, "Stalled") or ("",))[0] == "False"  # a change lifts it


@pytest.fixture
async def operator_without_passes(
    monkeypatch: pytest.MonkeyPatch, start_operator: Callable[[], Any]
) -> None:
    """The operator with its periodic passes far off (the served-models pass lists pods)."""
    for variable in ("RESYNC_INTERVAL", "CACHE_INTERVAL"):
        monkeypatch.setenv(f"CACHEFLEET_OPERATOR_{variable}", "3600")
    await start_operator()


@pytest.mark.usefixtures("operator_without_passes")
async def test_the_pods_are_watched_cluster_wide_by_label_not_listed_per_service(
    cluster: Cluster, api: Api
) -> None:
    await create_service(cluster, api, cache={"mode": "local"})
    await api.send("POST", PODS, pod("svc-a", **waiting("ErrImagePull", "denied")))
    await eventually(
        lambda: (reason_of(cluster, "Ready") or ("", ""))[1] == "ErrImagePull", "the reason"
    )
    # One list when the watch starts, then the watch: cluster-wide, filtered by the server.
    requests = [r for r in cluster["get"] if r.url.path == "/api/v1/pods"]
    assert "true" in {r.params.get("watch") for r in requests}
    assert {r.params.get("labelSelector") for r in requests} == {
        f"app.kubernetes.io/managed-by={MANAGER}"
    }
    # Seen through the watch: no list of the service's pods was needed.
    assert not [r for r in cluster["get"] if r.url.path == PODS]


def status_writes(cluster: Cluster) -> int:
    """Writes of the service's conditions (the served-models pass writes ``served`` alone)."""
    path = f"{CIS_PATH}/svc/status"
    return sum(
        1
        for r in cluster["patch"]
        if r.url.path.startswith(path[: -len("/status")])
        and "conditions" in ((r.data or {}).get("status") or {})
    )


@pytest.mark.usefixtures("operator")
async def test_repeated_evictions_are_reported_once(cluster: Cluster, api: Api) -> None:
    await create_service(cluster, api, cache={"mode": "local"})
    now = datetime.datetime.now(datetime.UTC)
    await api.send("POST", PODS, pod("svc-a", **evicted(now)))
    await eventually(
        lambda: (reason_of(cluster, "RuntimeReady") or ("", ""))[1] == "Evicted", "Evicted"
    )
    message = (reason_of(cluster, "Ready") or ("", "", ""))[2]
    assert message == f"a pod was evicted: {EVICTION.strip()}"
    writes = status_writes(cluster)
    # The next pod of the ReplicaSet outgrows its volume too, and the next.
    for name in ("svc-b", "svc-c"):
        await api.send("POST", PODS, pod(name, **evicted(datetime.datetime.now(datetime.UTC))))
    # Then a different cause: its write is the only one since.
    await api.send("POST", PODS, pod("svc-d", **waiting("ErrImagePull", "denied")))
    await eventually(
        lambda: (reason_of(cluster, "Ready") or ("", ""))[1] == "ErrImagePull", "the next cause"
    )
    assert status_writes(cluster) == writes + 1
    assert live(cluster, "v1/pods", "svc-c") is not None


def test_a_pod_no_node_takes_gives_the_schedulers_message() -> None:
    message = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    unscheduled = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                   "message": message}  # fmt: skip
    found = pod_problems.pod_problem("RuntimeReady", [pod("svc-a", conditions=[unscheduled])])
    assert found is not None
    assert (found.reason, found.message) == ("Unschedulable", f"pod svc-a: {message}")


MULTI_ATTACH = (
    'Multi-Attach error for volume "pvc-6b1f" Volume is already used by pod(s) other-7d9c-x2x9z'
)
MISSING_TLS = 'MountVolume.SetUp failed for volume "tls" : secret "svc-tls" not found'


def creating_pod(name: str) -> dict[str, Any]:
    """On a node, its container not started: what a pod waiting for its volumes shows."""
    scheduled = {"type": "PodScheduled", "status": "True"}
    return pod(name, conditions=[scheduled], **waiting("ContainerCreating", ""))


def pod_event(pod_name: str, reason: str, message: str) -> dict[str, Any]:
    """What the attach-detach controller or the kubelet posts about the pod."""
    now = stamp(datetime.datetime.now(datetime.UTC))
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod_name}.{reason.lower()}", "namespace": NS},
            "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": NS},
            "reason": reason, "type": "Warning", "message": message,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}  # fmt: skip


@pytest.mark.usefixtures("operator")
@pytest.mark.parametrize(
    ("reason", "message"),
    [("FailedAttachVolume", MULTI_ATTACH), ("FailedMount", MISSING_TLS)],
    ids=["multi-attach", "missing-tls-secret"],
)
async def test_a_volume_that_is_not_attached_or_mounted_says_why(
    cluster: Cluster, api: Api, reason: str, message: str
) -> None:
    await create_service(cluster, api, cache={"mode": "local"})
    await api.send("POST", PODS, creating_pod("svc-a"))
    # The pod does not change again: the cause comes later, as an event only.
    await api.send("POST", f"/api/v1/namespaces/{NS}/events", pod_event("svc-a", reason, message))
    found = await eventually(
        lambda: (reason_of(cluster, "Ready") or ("", ""))[1] == reason, reason, 60
    )
    assert found
    assert reason_of(cluster, "RuntimeReady") == ("False", reason, f"pod svc-a: {message}")


@pytest.mark.usefixtures("operator")
async def test_a_replica_failure_says_so_within_seconds(cluster: Cluster, api: Api) -> None:
    await create_service(cluster, api, cache={"mode": "local"})
    quota = ('pods "svc-7d9c6b5f4-x2x9z" is forbidden: exceeded quota: compute, requested: '
             "requests.nvidia.com/gpu=1, used: requests.nvidia.com/gpu=4, limited: "
             "requests.nvidia.com/gpu=4")  # fmt: skip
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
               "message": quota}  # fmt: skip
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc/status"
    await api.send("PATCH", path, {"status": {"conditions": [failure]}}, patch=True)
    found = await eventually(
        lambda: (reason_of(cluster, "Ready") or ("", ""))[1] == "PodsRefused", "PodsRefused",
        WITHIN_S,
    )  # fmt: skip
    assert found
    assert quota in (reason_of(cluster, "RuntimeReady") or ("", "", ""))[2]
