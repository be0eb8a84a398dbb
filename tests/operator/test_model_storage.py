"""spec.model.storageUri: what the operator renders for each scheme, that no credential reaches
the pod template, and the status a failing download gives (``ModelDownloadFailed`` with the
init container's termination message, as the kubelet reports it in the pod's status).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import (
    CIS_PATH,
    NS,
    Api,
    cis,
    condition,
    live,
    must,
    runtime_config,
    service,
)
from support.object_stores import MotoS3
from support.processes import CACHEFLEET

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner, selector_labels
from cachefleet.operator.manifests.spec import parse_spec
from cachefleet.operator.reconcile.init_failures import download_failure
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

KUBERNETES_VERSION = "1.32"
OWNER = Owner("svc", NS, "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
S3_MODEL = {"name": "simple", "storageUri": "s3://models/team/repository",
            "storageSecretName": "s3-credentials", "storageSizeLimit": "20Gi"}  # fmt: skip
#: What the Secret holds: never to be seen in anything the operator writes.
SECRET_VALUES = {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEYID0001",
                 "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI-example-secret-value"}  # fmt: skip


def render(model: dict[str, Any], **spec: Any) -> list[dict[str, Any]]:
    body = {"model": copy.deepcopy(model), "cache": {"mode": "local"}, **spec}
    return build_children(parse_spec(body), owner=OWNER, redis_password=None, cache_secret=None)


def pod_spec(children: list[dict[str, Any]]) -> dict[str, Any]:
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    return dict(deployment["spec"]["template"]["spec"])


def volumes(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in pod["volumes"]}


def test_s3_renders_a_fetch_container_of_the_runtime_image() -> None:
    children = render(S3_MODEL, runtime={"gpus": 1, "resources": {"limits": {"memory": "4Gi"}}})
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    pod = pod_spec(children)
    [fetch] = pod["initContainers"]
    [server] = pod["containers"]
    assert fetch["name"] == "fetch-model"
    assert fetch["image"] == server["image"]
    assert fetch["command"][:4] == ["cachefleet", "fetch-model", S3_MODEL["storageUri"],
                                    "/cachefleet-model-repository"]  # fmt: skip
    assert fetch["command"][fetch["command"].index("--model-name") + 1] == "simple"
    assert fetch["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert fetch["securityContext"] == server["securityContext"]
    # The server's, without the GPU; and the node disk the model volume takes, for the scheduler.
    assert fetch["resources"] == {
        "limits": {"memory": "4Gi"}, "requests": {"ephemeral-storage": "20Gi"}}  # fmt: skip
    secret_dir = fetch["command"][fetch["command"].index("--secret-dir") + 1]
    mounts = {m["name"]: m for m in fetch["volumeMounts"]}
    assert mounts["model-storage-credentials"] == {
        "name": "model-storage-credentials", "mountPath": secret_dir, "readOnly": True}  # fmt: skip
    assert mounts["models"]["mountPath"] == "/cachefleet-model-repository"
    assert "model-storage-credentials" not in {m["name"] for m in server["volumeMounts"]}
    found = volumes(pod)
    assert found["models"] == {"name": "models", "emptyDir": {"sizeLimit": "20Gi"}}
    assert found["model-storage-credentials"]["secret"]["secretName"] == "s3-credentials"
    # The fetch stops at the volume's limit itself, with a message, before the kubelet evicts;
    # told through the environment, which a pinned older image's fetch-model ignores, where it
    # would refuse an option it does not know.
    assert fetch["env"] == [{"name": "CACHEFLEET_MAX_BYTES", "value": "20Gi"}]
    assert "--max-bytes" not in fetch["command"]


def test_no_credential_is_copied_into_the_pod_template() -> None:
    """Only the Secret's name is rendered: no environment variable, no value, no ConfigMap."""
    children = render(S3_MODEL)
    text = json.dumps(children)
    assert text.count("s3-credentials") == 1  # the volume's secretName
    for key in SECRET_VALUES:
        assert key not in text
    pod = pod_spec(children)
    for container in pod["initContainers"] + pod["containers"]:
        for item in container.get("env") or []:
            ref = (item.get("valueFrom") or {}).get("secretKeyRef") or {}
            assert ref.get("name") != "s3-credentials"
        assert "envFrom" not in container


@pytest.mark.parametrize(
    "uri", ["https://models.example.com/simple.onnx", "gs://models/repository"]
)
def test_without_a_secret_nothing_is_mounted(uri: str) -> None:
    pod = pod_spec(render({"name": "simple", "storageUri": uri}))
    [fetch] = pod["initContainers"]
    assert "--secret-dir" not in fetch["command"]
    assert set(volumes(pod)) == {"config", "tmp", "models"}
    assert volumes(pod)["models"]["emptyDir"] == {"sizeLimit": "10Gi"}
    assert fetch["env"] == [{"name": "CACHEFLEET_MAX_BYTES", "value": "10Gi"}]


def test_a_claim_uri_is_mounted_read_only_not_downloaded() -> None:
    children = render({"name": "simple", "storageUri": "pvc://model-store/teams/a"})
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    pod = pod_spec(children)
    assert "initContainers" not in pod
    claim = {"claimName": "model-store", "readOnly": True}
    assert volumes(pod)["models"] == {"name": "models", "persistentVolumeClaim": claim}
    [server] = pod["containers"]
    [mount] = [m for m in server["volumeMounts"] if m["name"] == "models"]
    assert mount == {"name": "models", "mountPath": "/models", "readOnly": True,
                     "subPath": "teams/a"}  # fmt: skip


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            {"storageUri": "s3://b/m", "repository": {"pvc": {"claimName": "a"}}},
            "set exactly one of model.storageUri or model.repository",
        ),
        ({}, "set exactly one of model.storageUri or model.repository"),
        ({"storageUri": "ftp://host/m.onnx"}, "the scheme must be one of"),
        ({"storageUri": "https://u:p@host/m.onnx"}, "carries credentials"),
        ({"storageUri": "pvc://claim/../etc"}, "'.' or '..' segments"),
        ({"storageUri": "pvc://claim/repo", "storageSecretName": "s"}, "not read for a pvc://"),
        ({"storageUri": "https://host/"}, "must name a file"),
        ({"storageUri": "s3://models/m", "storageSizeLimit": "500m"}, "model.storageSizeLimit: "),
        ({"storageUri": "s3://models/m", "storageSizeLimit": 0}, "more than 0 bytes"),
    ],
    ids=[
        "both",
        "neither",
        "scheme",
        "userinfo",
        "dot-dot",
        "secret-for-claim",
        "no-file",
        "milli-bytes",
        "zero-bytes",
    ],
)
def test_a_bad_storage_spec_says_what_to_fix(model: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message.replace(".", r"\.").replace("?", r"\?")):
        parse_spec({"model": {"name": "simple", **model}})


def fetch_status(*, state: dict[str, Any], last: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"name": "fetch-model", "ready": False, "restartCount": 3,
                              "image": "x", "imageID": "", "state": state}  # fmt: skip
    if last is not None:
        status["lastState"] = last
    return status


MESSAGE = (
    "cannot fetch s3://models/team/repository: SignatureDoesNotMatch: The request signature we "
    "calculated does not match the signature you provided. (ListObjectsV2)"
)
TERMINATED = {"terminated": {"exitCode": 1, "reason": "Error", "message": MESSAGE + "\n"}}
CRASH_LOOP = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}


def runtime_pod(name: str, init_status: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS,
                     "labels": selector_labels(Owner("svc", NS), "runtime")},
        "spec": {"containers": [{"name": "server", "image": "x"}]},
        "status": {"phase": "Pending", "initContainerStatuses": [init_status]},
    }  # fmt: skip


def test_only_a_failed_fetch_is_a_download_failure() -> None:
    failed = download_failure([runtime_pod("svc-b", fetch_status(state=TERMINATED))])
    assert failed is not None
    assert (failed.status, failed.reason) == (False, "ModelDownloadFailed")
    assert failed.message == f"the model download failed in pod svc-b: {MESSAGE}"
    looping = download_failure([runtime_pod("svc-a", fetch_status(state=CRASH_LOOP,
                                                                  last=TERMINATED))])  # fmt: skip
    assert looping is not None
    assert MESSAGE in looping.message
    running = fetch_status(state={"running": {"startedAt": "2026-01-01T00:00:00Z"}})
    done = fetch_status(state={"terminated": {"exitCode": 0, "reason": "Completed"}})
    first_start = fetch_status(state={"waiting": {"reason": "PodInitializing"}})
    for status in (running, done, first_start):
        assert download_failure([runtime_pod("svc-a", status)]) is None
    no_message = {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
    oom = download_failure([runtime_pod("svc-a", fetch_status(state=no_message))])
    assert oom is not None
    assert oom.message.endswith("OOMKilled, exit code 137")


async def reconcile_status(cluster: Cluster) -> dict[str, Any]:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    reconciler = Reconciler(Kube(), OperatorSettings())
    outcome = await asyncio.to_thread(reconciler.reconcile, must(cis(cluster, "svc")))
    assert outcome.retry is None
    return {"status": outcome.status}


async def test_a_failing_download_shows_in_ready_with_the_uri_and_the_reason(
    cluster: Cluster, api: Api
) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "s3-credentials", "namespace": NS},
              "data": {k: base64.b64encode(v.encode()).decode()
                       for k, v in SECRET_VALUES.items()}}  # fmt: skip
    await api.send("POST", f"/api/v1/namespaces/{NS}/secrets", secret)
    await api.send("POST", CIS_PATH, service("svc", model=S3_MODEL, cache={"mode": "local"}))
    status = await reconcile_status(cluster)
    assert must(condition(status, "RuntimeReady"))["reason"] == "Progressing"
    deployment = must(live(cluster, "apps/v1/deployments", "svc"))
    rendered = json.dumps(deployment) + json.dumps(must(runtime_config(cluster, "svc")))
    for value in SECRET_VALUES.values():
        assert value not in rendered
    pods = f"/api/v1/namespaces/{NS}/pods"
    await api.send("POST", pods, runtime_pod("svc-a", fetch_status(state=CRASH_LOOP,
                                                                   last=TERMINATED)))  # fmt: skip
    status = await reconcile_status(cluster)
    ready, runtime = must(condition(status, "Ready")), must(condition(status, "RuntimeReady"))
    assert (ready["status"], ready["reason"]) == ("False", "ModelDownloadFailed")
    assert (runtime["status"], runtime["reason"]) == ("False", "ModelDownloadFailed")
    assert MESSAGE in ready["message"]
    assert "svc-a" in runtime["message"]
    assert must(condition(status, "Stalled"))["status"] == "False"  # it retries by itself
    # Past the rollout's progress deadline the download is still the reason given.
    deadline = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                "message": 'ReplicaSet "svc-1" has timed out progressing.'}  # fmt: skip
    path = f"/apis/apps/v1/namespaces/{NS}/deployments/svc/status"
    await api.send("PATCH", path, {"status": {"conditions": [deadline]}}, patch=True)
    status = await reconcile_status(cluster)
    assert must(condition(status, "Ready"))["reason"] == "ModelDownloadFailed"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    """moto's S3 server holding the `simple` sample under models/team/repository."""
    samples = tmp_path_factory.mktemp("samples") / "repo"
    subprocess.run([*CACHEFLEET, "samples", str(samples), "--model", "simple"], check=True)
    store = MotoS3(tmp_path_factory.mktemp("moto"))
    try:
        store.client().create_bucket(Bucket="models")
        store.upload_tree("models", "team/repository", samples)
        bundle = io.BytesIO()
        with zipfile.ZipFile(bundle, "w") as archive:
            for path in (p for p in samples.rglob("*") if p.is_file()):
                archive.write(path, str(path.relative_to(samples)))
        store.client().put_object(Bucket="models", Key="team/repository.zip",
                                  Body=bundle.getvalue())  # fmt: skip
        yield store
    finally:
        store.stop()


def run_rendered_fetch(
    model: dict[str, Any], secret: dict[str, str], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], Path, Path]:
    """The init container's own command line and environment, as rendered, with the pod's paths
    moved into ``tmp_path``: the model volume, the zip's scratch volume, the mounted Secret (one
    file per key), the termination log."""
    [fetch] = pod_spec(render(model))["initContainers"]
    secret_dir, repository, message = tmp_path / "secret", tmp_path / "models", tmp_path / "log"
    secret_dir.mkdir()
    (tmp_path / "scratch").mkdir()
    for key, value in secret.items():
        (secret_dir / key).write_text(value)
    moved = {"/cachefleet-model-repository": str(repository), "/dev/termination-log": str(message),
             "/var/run/secrets/cachefleet/model-storage": str(secret_dir),
             "/cachefleet-model-scratch": str(tmp_path / "scratch")}  # fmt: skip
    command = [moved.get(part, part) for part in fetch["command"][1:]]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CACHEFLEET_"))}
    env.update({item["name"]: moved.get(item["value"], item["value"]) for item in fetch["env"]})
    result = subprocess.run([*CACHEFLEET, *command], env=env, capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    return result, repository, message


def store_secret(store: MotoS3, secret_key: str) -> dict[str, str]:
    return {"AWS_ACCESS_KEY_ID": store.key.id, "AWS_SECRET_ACCESS_KEY": secret_key,
            "AWS_ENDPOINT_URL": store.endpoint, "AWS_DEFAULT_REGION": "us-east-1"}  # fmt: skip


def test_the_rendered_fetch_downloads_the_model(s3: MotoS3, tmp_path: Path) -> None:
    result, repository, _ = run_rendered_fetch(S3_MODEL, store_secret(s3, s3.key.secret), tmp_path)
    assert result.returncode == 0, result.stderr
    assert (repository / "simple" / "1" / "model.onnx").is_file()


def test_the_rendered_fetch_of_a_zip_unpacks_it_through_its_scratch_volume(
    s3: MotoS3, tmp_path: Path
) -> None:
    model = {**S3_MODEL, "storageUri": "s3://models/team/repository.zip"}
    result, repository, _ = run_rendered_fetch(model, store_secret(s3, s3.key.secret), tmp_path)
    assert result.returncode == 0, result.stderr
    assert (repository / "simple" / "1" / "model.onnx").is_file()
    assert not list(repository.rglob("*.zip"))
    assert list((tmp_path / "scratch").iterdir()) == []  # the zip waited there, and went


@pytest.mark.parametrize(
    ("uri", "scratch"),
    [("https://models.example.com/repository.zip", True),
     ("s3://models/team/Repository.ZIP", True),
     ("https://models.example.com/repository.tar.gz", False),
     ("gs://models/repository", False)],
)  # fmt: skip
def test_only_a_zip_gets_a_scratch_volume_and_the_request_counts_it(
    uri: str, scratch: bool
) -> None:
    """A tar streams into the model volume; a zip waits whole in an emptyDir of its own, as large
    as the model volume, and the node disk the fetch asks for is both together."""
    limits = {"memory": "4Gi", "ephemeral-storage": "1Gi"}
    model = {"name": "simple", "storageUri": uri, "storageSizeLimit": "6Gi"}
    children = render(model, runtime={"resources": {"limits": limits}})
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    pod = pod_spec(children)
    [fetch] = pod["initContainers"]
    mounts = {m["name"]: m["mountPath"] for m in fetch["volumeMounts"]}
    env = {e["name"]: e["value"] for e in fetch["env"]}
    disk = "12Gi" if scratch else "6Gi"
    assert fetch["resources"]["requests"]["ephemeral-storage"] == disk
    assert fetch["resources"]["limits"]["ephemeral-storage"] == disk
    if scratch:
        assert volumes(pod)["model-scratch"] == {"name": "model-scratch",
                                                 "emptyDir": {"sizeLimit": "6Gi"}}  # fmt: skip
        assert env["CACHEFLEET_SCRATCH_DIR"] == mounts["model-scratch"]
    else:
        assert "model-scratch" not in volumes(pod)
        assert "CACHEFLEET_SCRATCH_DIR" not in env
    [server] = pod["containers"]
    assert "model-scratch" not in {m["name"] for m in server["volumeMounts"]}


@pytest.mark.parametrize(
    ("uri", "good_key", "reason"),
    [
        ("s3://models/team/repository", False, "SignatureDoesNotMatch"),
        ("s3://models/team/missing", True, "no object in bucket models under 'team/missing'"),
    ],
    ids=["bad-credentials", "missing-object"],
)
async def test_a_real_failed_download_gives_the_documented_status(
    cluster: Cluster, api: Api, s3: MotoS3, tmp_path: Path, uri: str, good_key: bool, reason: str
) -> None:
    """The rendered init container run against a real S3 API; its termination message, as the
    kubelet reports it, becomes Ready's message (docs/guide/model-storage.md)."""
    model = {**S3_MODEL, "storageUri": uri}
    secret = store_secret(s3, s3.key.secret if good_key else "not-the-secret-key")
    result, _, message_file = run_rendered_fetch(model, secret, tmp_path)
    assert result.returncode == 1
    message = message_file.read_text()
    await api.send("POST", CIS_PATH, service("svc", model=model, cache={"mode": "local"}))
    await reconcile_status(cluster)
    failed = {"terminated": {"exitCode": result.returncode, "reason": "Error", "message": message}}
    pod = runtime_pod("svc-a", fetch_status(state=CRASH_LOOP, last=failed))
    await api.send("POST", f"/api/v1/namespaces/{NS}/pods", pod)
    ready = must(condition(await reconcile_status(cluster), "Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "ModelDownloadFailed")
    assert ready["message"].startswith(
        f"the model download failed in pod svc-a: cannot fetch {uri}: "
    )
    assert reason in ready["message"]
    assert s3.key.secret not in ready["message"]


@pytest.mark.parametrize(
    "model",
    [S3_MODEL, {"name": "simple", "repository": {"image": {"image": "m:1", "sizeLimit": "6Gi"}}}],
    ids=["download", "image copy"],
)
def test_the_container_filling_the_model_volume_requests_its_size_of_node_disk(
    model: dict[str, Any],
) -> None:
    """The scheduler counts an emptyDir only through ephemeral-storage requests: without one, a
    node's disk fills with models it never accounted for, and DiskPressure evicts neighbours."""
    limits = {"memory": "4Gi", "ephemeral-storage": "1Gi"}
    children = render(model, runtime={"resources": {"limits": limits}})
    for child in children:
        kubernetes_validate.validate(child, KUBERNETES_VERSION, strict=True)
    pod = pod_spec(children)
    size = volumes(pod)["models"]["emptyDir"]["sizeLimit"]
    [filler] = pod["initContainers"]
    assert filler["resources"]["requests"]["ephemeral-storage"] == size
    # A request above its limit is refused by the API server: the copied limit follows.
    assert filler["resources"]["limits"]["ephemeral-storage"] == size
    assert filler["resources"]["limits"]["memory"] == "4Gi"
