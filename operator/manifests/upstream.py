"""The runtime pods in front of a model server (``spec.server``): cachefleet's container in the
runtime's upstream mode, and for kind triton the Triton container beside it.

kind triton: every runtime pod holds two containers sharing the model volume. Triton loads the
repository (``--model-control-mode=none``) and listens for HTTP and gRPC on the pod's loopback
only, on ports of its own (``TRITON_*_PORT``, clear of cachefleet's 8000 and 8001); cachefleet
serves the Service's ports with ``--upstream grpc://127.0.0.1:<Triton's gRPC port>`` and
``--upstream-model-repository`` on the same mounted folder, so every key fingerprints the files
Triton loads. Triton answers anyone who reaches it without a credential, and its HTTP API has
shared-memory registration, logging settings and uncached inference: on loopback only the
cachefleet container can reach it. Its metrics port holds only ``/metrics`` and listens on the
pod's address (Triton's default), named ``triton-metrics`` in the pod and the Service for
Prometheus.

Probes: the kubelet probes the pod's address, where Triton's loopback ports are not, and an
exec probe would need a client binary inside the user's Triton image. So Triton has no probe of
its own: cachefleet's readiness follows Triton's (with strict readiness, the runtime's default,
its ``/v2/health/ready`` is false while Triton is unready, unreachable or does not answer within
``--upstream-control-timeout``), and cachefleet does not listen until Triton has answered once,
so its startup probe waits out Triton's model loading (with a longer budget than for a local
model). A Triton that exits restarts as any container does.

kind external: cachefleet's container alone, in upstream mode at ``server.url``, with no model
volume of ours; the auth value reaches it as ``CACHEFLEET_UPSTREAM_AUTH_VALUE`` from the Secret
(a ``secretKeyRef``), never in its arguments or ConfigMap. A private CA (``server.tls``) is the
ConfigMap's key mounted read-only and named by ``--upstream-tls-ca-file``.

Rotation: the runtime reads the auth value and the CA once, at start (``--upstream-auth-file``
is read once too, so mounting the Secret as a file would not let a running pod see a new
token). So, as for the runtime's own TLS Secret (``manifests.tls``), a digest of what the pods
read from them goes into the pod template (:data:`UPSTREAM_HASH_ANNOTATION`), and a new value
rolls the pods, paced like every rollout. The auth value is not part of any cache key, so the
new pods find the same entries in Redis: the fleet's cache stays warm across a rotation.
"""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests.meta import config_hash
from cachefleet.operator.manifests.security import container_security
from cachefleet.operator.manifests.spec import Server, ServiceSpec

TRITON_CONTAINER = "triton"
LOOPBACK = "127.0.0.1"
TRITON_HTTP_PORT = 8100
TRITON_GRPC_PORT = 8101
TRITON_METRICS_PORT = 8102
TRITON_METRICS_PORT_NAME = "triton-metrics"
#: Triton's scratch (its root filesystem is read-only, as cachefleet's).
TRITON_TMP_VOLUME = "triton-tmp"
AUTH_ENV = "CACHEFLEET_UPSTREAM_AUTH_VALUE"
#: The volume of ``server.tls.caConfigMapRef``, where cachefleet's container sees it, and the
#: file the key is written to.
CA_VOLUME = "upstream-ca"
CA_DIR = "/etc/cachefleet/upstream-ca"
CA_FILE = "ca.crt"
#: On the runtime's pod template: a digest of the upstream's auth value and CA (never either).
UPSTREAM_HASH_ANNOTATION = "cachefleet.io/upstream-hash"
GPU_RESOURCE = "nvidia.com/gpu"
#: How long cachefleet's startup probe waits for it to listen, which it does once the upstream
#: has answered: Triton loads every model first (a TensorRT engine can take minutes).
STARTUP_FAILURES = 180


def triton_url() -> str:
    """Where cachefleet reaches the Triton container of its own pod."""
    return f"grpc://{LOOPBACK}:{TRITON_GRPC_PORT}"


def upstream_arguments(server: Server, *, model_dir: str) -> list[str]:
    """cachefleet's upstream options (after ``cachefleet serve --config ...``)."""
    if server.kind == "triton":
        return ["--upstream", triton_url(), "--upstream-model-repository", model_dir]
    assert server.url is not None
    arguments = ["--upstream", server.url.rstrip("/")]
    if server.auth_secret_ref is not None:
        arguments += ["--upstream-auth-header", server.auth_header_or_default]
    if server.tls is not None:
        arguments += ["--upstream-tls-ca-file", f"{CA_DIR}/{CA_FILE}"]
    return arguments


def ca_volumes(server: Server | None) -> list[dict[str, Any]]:
    """The private CA's ConfigMap key as a volume of one file; none without ``server.tls``."""
    if server is None or server.tls is None:
        return []
    ref = server.tls.ca_config_map_ref
    source = {"name": ref.name, "items": [{"key": ref.key, "path": CA_FILE}], "defaultMode": 0o444}
    return [{"name": CA_VOLUME, "configMap": source}]


def ca_mounts(server: Server | None) -> list[dict[str, Any]]:
    """Where cachefleet's container reads the private CA, read-only."""
    if server is None or server.tls is None:
        return []
    return [{"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True}]


def upstream_digest(server: Server | None, *, auth_value: str | None, ca_pem: str | None) -> str:
    """A digest of what the pods read at start from the upstream's Secret and ConfigMap (as
    read now by the operator); "" when the spec names neither, or neither could be read yet
    (pods cannot start without them, so their arrival rolls nothing that runs)."""
    if server is None:
        return ""
    read: dict[str, str] = {}
    if server.auth_secret_ref is not None and auth_value is not None:
        read["auth"] = auth_value
    if server.tls is not None and ca_pem is not None:
        read["ca"] = ca_pem
    return config_hash("upstream", read) if read else ""


def upstream_env(server: Server) -> list[dict[str, Any]]:
    """The auth value from its Secret, for cachefleet's container; none without one."""
    ref = server.auth_secret_ref
    if ref is None:
        return []
    secret = {"name": ref.name, "key": ref.key}
    return [{"name": AUTH_ENV, "valueFrom": {"secretKeyRef": secret}}]


def triton_command(server: Server, *, model_dir: str) -> list[str]:
    """tritonserver on loopback ports, loading the shared repository, then the user's args."""
    return [
        "tritonserver",
        f"--model-repository={model_dir}",
        "--model-control-mode=none",
        f"--http-address={LOOPBACK}",
        f"--http-port={TRITON_HTTP_PORT}",
        f"--grpc-address={LOOPBACK}",
        f"--grpc-port={TRITON_GRPC_PORT}",
        f"--metrics-port={TRITON_METRICS_PORT}",
        *server.args,
    ]


def triton_container(spec: ServiceSpec, *, models_mount: dict[str, Any]) -> dict[str, Any]:
    """The Triton container: the spec's image, resources and GPUs, the model volume as
    cachefleet's container mounts it."""
    server = spec.server
    assert server is not None
    assert server.image is not None
    resources = server.resources.as_dict() if server.resources is not None else {}
    if server.gpus_or_default:
        resources.setdefault("limits", {})[GPU_RESOURCE] = server.gpus_or_default
    container: dict[str, Any] = {
        "name": TRITON_CONTAINER,
        "image": server.image,
        "imagePullPolicy": server.image_pull_policy_or_default,
        "command": triton_command(server, model_dir=models_mount["mountPath"]),
    }
    if server.env:
        container["env"] = [variable.as_dict() for variable in server.env]
    container.update(
        {
            "ports": [
                {
                    "name": TRITON_METRICS_PORT_NAME,
                    "containerPort": TRITON_METRICS_PORT,
                    "protocol": "TCP",
                }
            ],
            "resources": resources,
            "securityContext": container_security(),
            "volumeMounts": [
                {"name": TRITON_TMP_VOLUME, "mountPath": "/tmp"},
                dict(models_mount),
            ],
        }
    )
    return container


def triton_volumes(*, size_limit: str) -> list[dict[str, Any]]:
    return [{"name": TRITON_TMP_VOLUME, "emptyDir": {"sizeLimit": size_limit}}]


def metrics_service_ports(spec: ServiceSpec) -> list[dict[str, Any]]:
    """Triton's metrics on the runtime Service, for a ServiceMonitor; none for other kinds."""
    if spec.server is None or spec.server.kind != "triton":
        return []
    name = TRITON_METRICS_PORT_NAME
    return [{"name": name, "port": TRITON_METRICS_PORT, "targetPort": name}]
