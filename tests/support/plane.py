"""A real Kubernetes control plane on loopback, for the cluster tests (``tests/cluster/``).

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, as ``scripts/build-plane``
built them from their Go modules, each a process of ours stopped by its PID. Authentication is
real: a CA and certificates made per run (the admin's in ``system:masters``), service-account
keys, ``Node,RBAC`` authorization and the admission plugins a cluster has. The controller
manager runs every controller with its own service-account credentials (the real garbage
collector, the Deployment, ReplicaSet and StatefulSet controllers, the PV binder), the scheduler
places pods on kwok's nodes, and kwok plays the kubelets: nodes turn Ready and pods Running
through the stages of kwok's own release. kwok runs no container, so nothing listens on a pod's
address.
"""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from support.certificates import make_authority
from support.processes import ManagedProcess, free_port

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[2]
#: The annotation kwok manages nodes by (``--manage-nodes-with-annotation-selector``).
KWOK_NODE = {"kwok.x-k8s.io/node": "fake"}
#: The GPU nodes' labels, as NVIDIA's GPU feature discovery sets them.
GPU_LABELS = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-A10G"}
#: The project's custom resource, as kubectl names it.
SERVICES = "cachedinferenceservices.cachefleet.io"
ADMISSION = (
    "NamespaceLifecycle,LimitRanger,ServiceAccount,NodeRestriction,TaintNodesByCondition,"
    "PodSecurity,Priority,DefaultTolerationSeconds,DefaultStorageClass,"
    "StorageObjectInUseProtection,PersistentVolumeClaimResize,RuntimeClass,"
    "MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,ResourceQuota"
)


class PlaneError(RuntimeError):
    """The plane did not start, or a kubectl call failed."""


def plane_bin() -> Path | None:
    """The folder of the built plane, or None when ``scripts/build-plane`` has not built it."""
    found = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build-plane"), "--where"],
        capture_output=True,
        text=True,
        check=False,
    )
    return Path(found.stdout.strip()) if found.returncode == 0 else None


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: int = 0


@dataclass
class Plane:
    """The control plane of one test session, its files in ``folder``."""

    bin: Path
    folder: Path
    nodes: Sequence[NodeSpec] = (
        NodeSpec("kwok-cpu-0"),
        NodeSpec("kwok-cpu-1"),
        NodeSpec("kwok-gpu-0", gpus=4),
    )
    persistent_volumes: int = 16
    expandable_volumes: int = 4
    #: The controller-manager's client rate limit (``--kube-api-qps``, a burst of twice it);
    #: None keeps its default, 20 a second for each controller.
    controller_qps: int | None = None
    processes: list[ManagedProcess] = field(default_factory=list)
    port: int = 0
    #: Seconds from the first process started to every node Ready (reported by the tests).
    start_s: float = 0.0

    @property
    def kubeconfig(self) -> Path:
        return self.folder / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca(self) -> Path:
        return self.folder / "pki" / "ca.crt"

    def http(self, token: str | None = None) -> httpx.Client:
        """A plain HTTP client of the API server: as the admin (its client certificate), or
        with ``token`` (a service account's). For requests kubectl cannot shape (a JSON patch,
        an apply of a chosen body, a watch from a resourceVersion)."""
        context = ssl.create_default_context(cafile=str(self.ca))
        headers = {}
        if token is None:
            pki = self.folder / "pki"
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        else:
            headers["Authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.server, verify=context, headers=headers, timeout=60)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a client of the plane as its admin."""
        path = f"{self.bin}{os.pathsep}{ROOT / '.cache' / 'tools' / 'bin'}{os.pathsep}"
        return {**os.environ, "KUBECONFIG": str(self.kubeconfig),
                "PATH": path + os.environ.get("PATH", ""), **extra}  # fmt: skip

    def kubectl(
        self,
        *args: str,
        stdin: str | None = None,
        check: bool = True,
        kubeconfig: Path | None = None,
        timeout_s: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl ARGS`` as the admin (or with ``kubeconfig``); raises with its output when it
        fails and ``check``."""
        env = self.env(KUBECONFIG=str(kubeconfig or self.kubeconfig))
        done = subprocess.run([str(self.bin / "kubectl"), *args], input=stdin, env=env,
                              capture_output=True, text=True, timeout=timeout_s)  # fmt: skip
        if check and done.returncode != 0:
            raise PlaneError(f"kubectl {' '.join(args)}: {done.returncode}\n{done.stderr}")
        return done

    def get(self, *args: str) -> Any:
        """``kubectl get ARGS -o json``, parsed."""
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, manifest: str | list[dict[str, Any]], *args: str) -> str:
        """Server-side apply of YAML text or objects, as kubectl does it; its output."""
        text = manifest if isinstance(manifest, str) else yaml.safe_dump_all(manifest)
        return self.kubectl("apply", "--server-side", "-f", "-", *args, stdin=text).stdout

    def condition(self, resource: str, namespace: str, kind: str) -> str | None:
        """The status of condition ``kind`` on ``resource`` (None: no such object or condition)."""
        done = self.kubectl("get", resource, "-n", namespace, "-o", "json", check=False)
        return _condition(json.loads(done.stdout), kind) if done.returncode == 0 else None

    def established(self, crd: str) -> None:
        """Wait for the CRD ``crd`` (``crd/NAME``) to be served. Polled: ``kubectl wait`` fails
        at once on a CRD the server has not given conditions yet ("<nil> is of the type
        <nil>")."""
        until(lambda: self.condition(crd, "default", "Established") == "True",
              f"{crd} Established", timeout_s=60)  # fmt: skip

    def namespaces(self) -> set[str]:
        """The names of the namespaces there are (those being deleted included)."""
        return {item["metadata"]["name"] for item in self.get("namespaces")["items"]}

    def delete_fleets_and_namespaces(self, namespaces: Iterable[str]) -> None:
        """Delete every CachedInferenceService, waiting until each is gone with what it owns,
        then the ``namespaces``, waiting until each is gone with all it holds.

        Foreground deletion: the garbage collector deletes a service's Deployment and
        StatefulSet (owned with ``blockOwnerDeletion``) before the service itself, so once the
        services are gone no runtime Deployment of theirs is left for an operator to count."""
        self.kubectl("delete", SERVICES, "--all", "--all-namespaces", "--cascade=foreground",
                     "--wait=true", "--timeout=300s", timeout_s=330)  # fmt: skip
        names = sorted(namespaces)
        if names:
            self.kubectl("delete", "namespace", *names, "--ignore-not-found", "--wait=true",
                         "--timeout=300s", timeout_s=330)  # fmt: skip

    # Starting and stopping.

    def start(self) -> None:
        started = time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        pki = self._pki()
        self._etcd_and_apiserver(pki)
        for name in ("kube-controller-manager", "kube-scheduler"):
            self._component(name)
        self._kwok()
        self._cluster_objects()
        self.start_s = time.monotonic() - started

    def stop(self) -> None:
        """Every process, newest first, each by the PID we started it with."""
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def _spawn(self, name: str, *args: str) -> ManagedProcess:
        process = ManagedProcess(name, [str(self.bin / name), *args],
                                 self.folder / f"{name}.log", dict(os.environ))  # fmt: skip
        self.processes.append(process)
        return process

    def _pki(self) -> dict[str, Path]:
        folder = self.folder / "pki"
        authority = make_authority(folder, "ca")
        server = authority.issue(folder, "kube-apiserver")
        admin = authority.issue(folder, "admin", client=True, organization="system:masters")
        signing = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (folder / "sa.key").write_bytes(
            signing.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        (folder / "sa.pub").write_bytes(
            signing.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        return {"ca": authority.cert, "ca.key": authority.key, "server": server.cert,
                "server.key": server.key, "admin": admin.cert, "admin.key": admin.key,
                "sa.key": folder / "sa.key", "sa.pub": folder / "sa.pub"}  # fmt: skip

    def _etcd_and_apiserver(self, pki: dict[str, Path]) -> None:
        client, peer = free_port(), free_port()
        self._spawn(
            "etcd", "--name", "plane", "--data-dir", str(self.folder / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{client}",
            "--advertise-client-urls", f"http://127.0.0.1:{client}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"plane=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync", "--log-level", "warn",
        )  # fmt: skip
        self.port = free_port()
        apiserver = self._spawn(
            "kube-apiserver", "--etcd-servers", f"http://127.0.0.1:{client}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(self.port),
            "--tls-cert-file", str(pki["server"]), "--tls-private-key-file", str(pki["server.key"]),
            "--client-ca-file", str(pki["ca"]),
            "--authorization-mode", "Node,RBAC", "--enable-admission-plugins", ADMISSION,
            "--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file", str(pki["sa.pub"]),
            "--service-account-signing-key-file", str(pki["sa.key"]),
            "--service-cluster-ip-range", "10.96.0.0/16", "--allow-privileged",
            "--endpoint-reconciler-type", "none", "--profiling=false",
            "--cert-dir", str(self.folder / "apiserver-certs"),
        )  # fmt: skip
        self._write_kubeconfig(pki)
        apiserver.wait_until(self._ready, timeout_s=180)

    def _ready(self) -> bool:
        done = self.kubectl("get", "--raw", "/readyz", check=False, timeout_s=20)
        return done.returncode == 0 and done.stdout.strip() == "ok"

    def _write_kubeconfig(self, pki: dict[str, Path]) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plane", "cluster": {
                "server": self.server, "certificate-authority": str(pki["ca"])}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(pki["admin"]), "client-key": str(pki["admin.key"])}}],
            "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "admin"}}],
            "current-context": "plane",
        }  # fmt: skip
        self.kubeconfig.write_text(yaml.safe_dump(config))

    def token_kubeconfig(self, path: Path, token: str, server: str | None = None) -> Path:
        """A kubeconfig holding ``token`` (a service account's), for ``server`` (a proxy in
        front of the API server, say) or the API server itself."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plane", "cluster": {
                "server": server or self.server, "certificate-authority": str(self.ca)}}],
            "users": [{"name": "token", "user": {"token": token}}],
            "contexts": [{"name": "plane", "context": {"cluster": "plane", "user": "token"}}],
            "current-context": "plane",
        }  # fmt: skip
        path.write_text(yaml.safe_dump(config))
        return path

    def _component(self, name: str) -> None:
        pki = self.folder / "pki"
        common = ["--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
                  "--authentication-kubeconfig", str(self.kubeconfig),
                  "--authorization-kubeconfig", str(self.kubeconfig),
                  "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
                  "--cert-dir", str(self.folder / f"{name}-certs")]  # fmt: skip
        if name == "kube-controller-manager":
            common += ["--use-service-account-credentials", "--controllers", "*",
                       "--service-account-private-key-file", str(pki / "sa.key"),
                       "--root-ca-file", str(pki / "ca.crt"),
                       "--cluster-signing-cert-file", str(pki / "ca.crt"),
                       "--cluster-signing-key-file", str(pki / "ca.key"),
                       "--concurrent-gc-syncs", "5",
                       # kwok's heartbeat stage renews a node every 20-45 s: within the default
                       # 50 s grace only on an idle machine. A node marked NotReady has its
                       # pods' Ready set False, which kwok (no kubelet) never sets back.
                       "--node-monitor-grace-period", "10m"]  # fmt: skip
            if self.controller_qps is not None:
                common += ["--kube-api-qps", str(self.controller_qps),
                           "--kube-api-burst", str(2 * self.controller_qps)]  # fmt: skip
        self._spawn(name, *common)

    def _kwok(self) -> None:
        # kwok's own stages, and the project's (``kwok_stages/``: pods of images from
        # registry.invalid cannot pull them, those of crash.invalid crash-loop).
        stages = sorted((self.bin / "stages").glob("*.yaml"))
        stages += sorted((Path(__file__).parent / "kwok_stages").glob("*.yaml"))
        config = self.folder / "kwok.yaml"
        config.write_text("\n---\n".join(path.read_text() for path in stages))
        self._spawn(
            "kwok", "--kubeconfig", str(self.kubeconfig), "--config", str(config),
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector", "kwok.x-k8s.io/node=fake",
            "--server-address", f"127.0.0.1:{free_port()}",
        )  # fmt: skip

    def _cluster_objects(self) -> None:
        self.apply(list(self._node_objects()))
        self.apply(list(self._storage_objects()))
        deadline = time.monotonic() + 180
        while True:
            nodes = self.get("nodes")["items"]
            ready = [n for n in nodes if _condition(n, "Ready") == "True"]
            if len(ready) == len(self.nodes):
                return
            if time.monotonic() > deadline:
                raise PlaneError(f"nodes not Ready: {[n['metadata']['name'] for n in nodes]}")
            time.sleep(0.5)

    def _node_objects(self) -> Iterator[dict[str, Any]]:
        for node in self.nodes:
            capacity = {"cpu": "32", "memory": "128Gi", "pods": "110",
                        "ephemeral-storage": "500Gi"}  # fmt: skip
            labels = {"kubernetes.io/hostname": node.name, "kubernetes.io/os": "linux",
                      "kubernetes.io/arch": "amd64", "type": "kwok"}  # fmt: skip
            if node.gpus:
                capacity["nvidia.com/gpu"] = str(node.gpus)
                labels.update(GPU_LABELS)
            yield {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": node.name, "annotations": KWOK_NODE, "labels": labels},
                "status": {"capacity": capacity, "allocatable": capacity},
            }

    def _storage_objects(self) -> Iterator[dict[str, Any]]:
        """The default class ``standard`` (no volume expansion) and ``expandable`` (a class
        that allows it), each with static volumes the PV binder binds claims to."""
        classes = {"standard": self.persistent_volumes, "expandable": self.expandable_volumes}
        for name, count in classes.items():
            default = str(name == "standard").lower()
            yield {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": name, "annotations": {
                    "storageclass.kubernetes.io/is-default-class": default}},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "Immediate",
                "reclaimPolicy": "Retain",
                "allowVolumeExpansion": name == "expandable",
            }  # fmt: skip
            for index in range(count):
                volume = f"pv-{index}" if name == "standard" else f"pv-{name}-{index}"
                yield {
                    "apiVersion": "v1",
                    "kind": "PersistentVolume",
                    "metadata": {"name": volume},
                    "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": name,
                             "persistentVolumeReclaimPolicy": "Retain",
                             "hostPath": {"path": f"/nonexistent/{volume}"}},
                }  # fmt: skip


def until(check: Callable[[], T], what: str, timeout_s: float = 120) -> T:
    """Poll ``check`` every half second (each poll is a kubectl call or an API request) until it
    returns something truthy; fail with ``what`` at the deadline."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.5)
    return result


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None
