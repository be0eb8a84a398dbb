"""The runtime fleet: Deployment, Service, ConfigMap with the runtime settings (its scaler is in
:mod:`~cachefleet.operator.manifests.autoscaling`)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from cachefleet.operator.manifests import meta, model_fetch, upstream
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import RUNTIME_GRPC_PORT, RUNTIME_PORT, Owner
from cachefleet.operator.manifests.redis import password_ref
from cachefleet.operator.manifests.release import RELEASE_RUNTIME_IMAGE
from cachefleet.operator.manifests.security import container_security, pod_security
from cachefleet.operator.manifests.spec import ImageSource, SecretKeyRef, ServiceSpec
from cachefleet.operator.manifests.tls import SCHEME_LABEL, TLS_HASH_ANNOTATION
from cachefleet.operator.manifests.tracing import tracing_env
from cachefleet.runtime.config import (
    CacheSettings,
    LimitSettings,
    ModelSettings,
    QuantityError,
    RedisSettings,
    RuntimeSettings,
    SecuritySettings,
    ServerSettings,
    format_bytes,
    parse_bytes,
    parse_duration_s,
)

COMPONENT = "runtime"
RUNTIME_USER_ID = 10001  # the runtime image's user (Dockerfile)
CONFIG_DIR = "/etc/cachefleet"
MODEL_DIR = "/models"
# Where the init container sees the shared emptyDir: never the image's own repository path
# (by default also /models), or the copy would read from the empty volume mounted over it.
COPY_DESTINATION = model_fetch.REPOSITORY_MOUNT
PASSWORD_ENV = "CACHEFLEET_REDIS_PASSWORD"
#: The admin token's key in the fleet's Secret, the variable the pods read it into, and the
#: header it goes in.
ADMIN_TOKEN_KEY = "admin-token"
ADMIN_TOKEN_ENV = "CACHEFLEET_ADMIN_TOKEN"
ADMIN_HEADER = "cachefleet-admin-token"
#: Where the pods see the user's TLS Secret (spec.runtime.tls.secretName).
TLS_DIR = "/etc/cachefleet/tls"
CACHE_SECRET_ENV = "CACHEFLEET_CACHE_SECRET"
#: The key of the generated cache Secret.
CACHE_SECRET_KEY = "cache-secret"
#: The share of the runtime container's memory limit that requests in flight may hold (split
#: between its worker processes); models, the local cache and the memo take the rest.
INFLIGHT_SHARE = 4
GPU_RESOURCE = "nvidia.com/gpu"
#: Hex digits of the content digest in a runtime ConfigMap's name.
CONFIG_NAME_DIGEST = 10
#: The server's /tmp: scratch only (the root filesystem is read-only).
TMP_SIZE_LIMIT = "256Mi"
EPHEMERAL_STORAGE = "ephemeral-storage"
DEFAULT_COPY_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"cpu": "1", "memory": "512Mi"},
}


def runtime_settings(spec: ServiceSpec, *, owner: Owner) -> RuntimeSettings:
    """The settings `cachefleet serve` reads from the ConfigMap (never a password)."""
    cache = spec.cache
    try:
        cache_settings = CacheSettings(
            mode=cache.mode,
            admission=cache.admission,
            local_size_bytes=parse_bytes(cache.local.size),
            ttl_s=parse_duration_s(cache.ttl),
            namespace=cache_namespace(spec, owner=owner),
        )
    except QuantityError as error:
        raise SpecError(f"spec.cache: {error}") from None
    return RuntimeSettings(
        limits=limit_settings(spec),
        server=ServerSettings(
            port=RUNTIME_PORT,
            grpc_port=RUNTIME_GRPC_PORT,
            workers=spec.runtime.workers,
            log_level=spec.runtime.log_level,
        ),
        models=ModelSettings(
            # In front of a server (``spec.server``) the models are the upstream's.
            repository=Path(MODEL_DIR) if spec.server is None else None,
            cache_all_models=spec.model.cache_all_models,
            row_cache_models=(spec.model.name,) if spec.model.row_cache else (),
            execution_provider=spec.runtime.execution_provider,
        ),
        cache=cache_settings,
        redis=redis_settings(spec, owner=owner),
        security=security_settings(spec),
    )


def security_settings(spec: ServiceSpec) -> SecuritySettings:
    """TLS from the mounted Secret; the restrictions are not here (their token is a secret:
    the pods read them from the environment, see :func:`_restriction_env`)."""
    tls = spec.runtime.tls
    if tls is None:
        return SecuritySettings()
    cert, key = Path(TLS_DIR, "tls.crt"), Path(TLS_DIR, "tls.key")
    return SecuritySettings(
        grpc_use_ssl=True,
        grpc_server_cert=cert,
        grpc_server_key=key,
        grpc_use_ssl_mutual=tls.mutual,
        grpc_root_cert=Path(TLS_DIR, "ca.crt") if tls.mutual else None,
        ssl_certfile=cert,
        ssl_keyfile=key,
    )


def cache_namespace(spec: ServiceSpec, *, owner: Owner) -> str:
    """The fleet's share of Redis: ``<namespace>/<name>``, unless the spec names one (two
    services that deliberately share answers name the same one, and the same secret)."""
    return spec.cache.namespace or f"{owner.namespace}/{owner.name}"


def cache_secret_ref(spec: ServiceSpec, *, owner: Owner) -> SecretKeyRef | None:
    """Where the pods read the key of the Redis entries' MAC; None without a Redis tier."""
    if not spec.cache.uses_redis:
        return None
    return spec.cache.secret_ref or SecretKeyRef(
        name=meta.cache_secret_name(owner), key=CACHE_SECRET_KEY
    )


def build_fleet_secret(
    spec: ServiceSpec, *, owner: Owner, secret: str | None = None, admin_token: str | None = None
) -> dict[str, Any]:
    """The fleet's generated Secret: the cache secret and/or the admin token, each kept by the
    caller across reconciles."""
    data = {CACHE_SECRET_KEY: secret, ADMIN_TOKEN_KEY: admin_token}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta.metadata(owner, meta.cache_secret_name(owner), COMPONENT),
        "type": "Opaque",
        "data": {
            k: base64.b64encode(v.encode()).decode() for k, v in data.items() if v is not None
        },
    }


def limit_settings(spec: ServiceSpec) -> LimitSettings:
    """The runtime's limits; the budget of request bytes in flight derived from the container's
    memory limit when it has one (a quarter of it, shared by the workers), else the default."""
    memory = spec.runtime.resources.limits.get("memory")
    if memory is None:
        return LimitSettings()
    try:
        limit = parse_bytes(memory)
    except QuantityError as error:
        raise SpecError(f"spec.runtime.resources.limits.memory: {error}") from None
    share = max(1, limit // INFLIGHT_SHARE // spec.runtime.workers)
    return LimitSettings(max_inflight_bytes=share)


def redis_settings(spec: ServiceSpec, *, owner: Owner) -> RedisSettings:
    """Where the pods find Redis: the managed one, or the external one in its mode."""
    external = spec.cache.redis.external
    if external is None or not spec.cache.uses_redis:
        return RedisSettings(url=redis_url(spec, owner=owner))
    return RedisSettings(
        url=external.url, mode=external.mode, sentinel_master=external.sentinel_master
    )


def redis_url(spec: ServiceSpec, *, owner: Owner) -> str | None:
    if not spec.cache.uses_redis:
        return None
    external = spec.cache.redis.external
    return external.url if external is not None else meta.managed_redis_url(owner)


def redis_password_ref(spec: ServiceSpec, *, owner: Owner) -> SecretKeyRef | None:
    if not spec.cache.uses_redis:
        return None
    external = spec.cache.redis.external
    return external.password_secret_ref if external is not None else password_ref(spec, owner)


def config_document(settings: RuntimeSettings) -> dict[str, Any]:
    """The settings that differ from the runtime's own defaults, as the ConfigMap holds them.

    A default is left to the runtime: a pod of an older image refuses settings it does not know
    (its model forbids extra fields), and a setting a release adds has its default there. So a
    new operator never renders something an old image cannot read, and adding a setting changes
    no ConfigMap and rolls no pods.
    """
    return settings.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def build_runtime_configmap(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    """The settings, immutable and named by their content.

    A pod reads its ConfigMap whenever it starts, so a ConfigMap changed in place would reach
    old pods that restart mid-rollout (an older runtime refusing a newer operator's settings).
    A new content is a new ConfigMap instead, mounted by the new pod template only; the old one
    stays until no ReplicaSet runs it (see ``reconcile.runtime_configs``).
    """
    document = config_document(runtime_settings(spec, owner=owner))
    data = {"config.yaml": yaml.safe_dump(document, sort_keys=True)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta.metadata(owner, runtime_configmap_name(owner, data), COMPONENT),
        "immutable": True,
        "data": data,
    }


def runtime_configmap_name(owner: Owner, data: dict[str, str]) -> str:
    """``<name>-config-<digest of the data>``: at most 46 + 18 characters (a ConfigMap name may
    have 253), and it never ends like another child's name (``-redis-config``)."""
    return f"{owner.name}-config-{meta.config_hash(data)[:CONFIG_NAME_DIGEST]}"


def is_runtime_configmap(owner: Owner, name: str) -> bool:
    """Whether ``name`` is one of the fleet's runtime ConfigMaps: named by content, or the
    ``<name>-config`` of releases before 0.2.0."""
    prefix = f"{owner.name}-config"
    digest = name.removeprefix(f"{prefix}-")
    named_by_content = len(digest) == CONFIG_NAME_DIGEST and digest != name
    return name == prefix or (named_by_content and all(c in "0123456789abcdef" for c in digest))


def build_runtime_service(spec: ServiceSpec, *, owner: Owner) -> dict[str, Any]:
    metadata = meta.metadata(owner, owner.name, COMPONENT)
    if spec.runtime.tls is not None:  # (scraped over HTTPS: ``manifests.tls``)
        metadata["labels"][SCHEME_LABEL] = "https"
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "type": "ClusterIP",
            "selector": meta.selector_labels(owner, COMPONENT),
            "ports": [
                {"name": "http", "port": RUNTIME_PORT, "targetPort": "http"},
                {"name": "grpc", "port": RUNTIME_GRPC_PORT, "targetPort": "grpc"},
                *upstream.metrics_service_ports(spec),
            ],
        },
    }


def build_runtime_deployment(
    spec: ServiceSpec,
    *,
    owner: Owner,
    password_digest: str = "",
    runtime_image: str = RELEASE_RUNTIME_IMAGE,
    tls_digest: str = "",
    upstream_digest: str = "",
) -> dict[str, Any]:
    """The server pods; ``password_digest`` (of the secrets they read at start: the Redis
    password, the cache secret) rolls them when a generated one was replaced, ``tls_digest``
    (``manifests.tls``) when their certificate was renewed, ``upstream_digest``
    (``upstream.upstream_digest``) when the upstream's auth value or CA was.

    ``runtime_image`` runs when the spec names no image: the operator's own release's runtime.
    """
    configmap = build_runtime_configmap(spec, owner=owner)
    pod = _pod_spec(spec, owner, runtime_image, configmap["metadata"]["name"])
    template = {"metadata": _pod_metadata(spec, owner, pod, configmap, password_digest),
                "spec": pod}  # fmt: skip
    if spec.runtime.tls is not None and tls_digest:
        template["metadata"]["annotations"][TLS_HASH_ANNOTATION] = tls_digest
    if spec.server is not None and upstream_digest:
        template["metadata"]["annotations"][upstream.UPSTREAM_HASH_ANNOTATION] = upstream_digest
    deployment_spec: dict[str, Any] = {
        "selector": {"matchLabels": meta.selector_labels(owner, COMPONENT)},
        "template": template,
    }
    if spec.autoscaling is None:  # else the scaler (an HPA, or KEDA's) owns the count
        deployment_spec["replicas"] = spec.replicas
    if spec.runtime.gpus or (spec.server is not None and spec.server.gpus_or_default):
        # A surge pod would need a GPU beyond the replicas' own, and on a full GPU pool it stays
        # Pending forever: replace one pod at a time instead.
        deployment_spec["strategy"] = {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
        }
    metadata = meta.metadata(owner, owner.name, COMPONENT)
    # On the Deployment, not its pods: tells the pacing of rollouts whether applying this would
    # roll the pods, without comparing against a template the API server has defaulted.
    metadata["annotations"] = {meta.TEMPLATE_HASH_ANNOTATION: meta.config_hash(template)}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata,
            "spec": deployment_spec}  # fmt: skip


def _pod_metadata(
    spec: ServiceSpec, owner: Owner, pod: dict[str, Any], configmap: dict[str, Any], digest: str
) -> Any:
    """Labels and annotations of the pods: the user's first, the operator's over them."""
    annotations = {
        **spec.runtime.pod_annotations,
        **meta.safe_to_evict_annotation(pod),
        meta.CONFIG_HASH_ANNOTATION: meta.config_hash(configmap["data"], digest),
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(RUNTIME_PORT),
        "prometheus.io/path": "/metrics",
        "prometheus.io/scheme": "https" if spec.runtime.tls else "http",
    }
    labels = {**spec.runtime.pod_labels, **meta.labels(owner, COMPONENT)}
    return {"labels": labels, "annotations": annotations}


def _pod_spec(
    spec: ServiceSpec, owner: Owner, runtime_image: str, configmap_name: str
) -> dict[str, Any]:
    runtime = spec.runtime
    server = _server_container(spec, owner, runtime_image)
    security = pod_security(RUNTIME_USER_ID, user_ids=spec.user_ids or "fixed")
    pod: dict[str, Any] = {"securityContext": security}
    if runtime.service_account_name is not None:
        pod["serviceAccountName"] = runtime.service_account_name
    pod["automountServiceAccountToken"] = False
    pod.update(meta.pull_secrets(spec))
    image_source = spec.model.image
    model_volume = _model_volume(spec)
    size = ((model_volume or {}).get("emptyDir") or {}).get("sizeLimit")
    if image_source is not None:
        resources = _filling(copy_resources(server["resources"]), size)
        pod["initContainers"] = [_copy_container(image_source, resources)]
    if spec.model.download is not None:
        scratch = model_fetch.scratch_volumes(spec)
        disk = _total_size([size, *(v["emptyDir"]["sizeLimit"] for v in scratch)])
        resources = _filling(copy_resources(server["resources"]), disk)
        pod["initContainers"] = [model_fetch.fetch_container(spec, server["image"], resources)]
    pod["containers"] = [server]
    pod["volumes"] = [
        {"name": "config", "configMap": {"name": configmap_name}},
        {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}},
        *([model_volume] if model_volume is not None else []),
        *model_fetch.scratch_volumes(spec),
        *model_fetch.credential_volumes(spec),
        *upstream.ca_volumes(spec.server),
    ]
    if spec.server is not None and spec.server.kind == "triton":
        pod["containers"].append(upstream.triton_container(spec, models_mount=_models_mount(spec)))
        pod["volumes"] += upstream.triton_volumes(size_limit=TMP_SIZE_LIMIT)
    if runtime.tls is not None:
        pod["volumes"].append(
            {"name": "tls", "secret": {"secretName": runtime.tls.secret_name, "defaultMode": 0o440}}
        )
    if runtime.node_selector:
        pod["nodeSelector"] = dict(runtime.node_selector)
    if runtime.tolerations:
        pod["tolerations"] = [dict(t) for t in runtime.tolerations]
    if runtime.affinity:
        pod["affinity"] = dict(runtime.affinity)
    if runtime.topology_spread_constraints:
        pod["topologySpreadConstraints"] = [dict(t) for t in runtime.topology_spread_constraints]
    return pod


def _copy_container(source: ImageSource, resources: dict[str, Any]) -> dict[str, Any]:
    """The init container that copies the repository out of the model image."""
    return {
        "name": "copy-models",
        "image": source.image,
        "imagePullPolicy": source.pull_policy,
        "command": ["sh", "-c", f'cp -R "{source.path.rstrip("/")}/." {COPY_DESTINATION}/'],
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": [{"name": "models", "mountPath": COPY_DESTINATION}],
    }


def copy_resources(server: dict[str, Any]) -> dict[str, Any]:
    """The copy's resources: the server's CPU and memory, without its GPUs.

    A namespace with a ResourceQuota (and no LimitRange to fill them in) refuses a pod with any
    container that has no requests or limits for what the quota counts. Giving the copy what the
    server asks for passes every quota the server passes, and costs nothing: a pod's effective
    request is the larger of its init containers' and the sum of its containers'. Without server
    resources the copy still gets a small bound of its own.
    """
    copied = {
        section: {k: v for k, v in values.items() if k != GPU_RESOURCE}
        for section, values in server.items()
    }
    copied = {section: values for section, values in copied.items() if values}
    return copied or {k: dict(v) for k, v in DEFAULT_COPY_RESOURCES.items()}


def _filling(resources: dict[str, Any], size: str | None) -> dict[str, Any]:
    """``resources`` of the init container that fills the model emptyDir, asking for the
    volume's ``size`` of node disk (with the zip's scratch emptyDir, both together).

    The scheduler counts an emptyDir only through ``ephemeral-storage`` requests; without one a
    10Gi model lands on a node with no room for it, and the kubelet's DiskPressure evicts the
    neighbours. The request stays in force while the server runs (a pod's effective request is
    the larger of its init containers' and the sum of its containers'), as the volume does. A
    copied ``ephemeral-storage`` limit becomes the volume's size too (a request must not exceed
    its limit; the container writes nowhere else: its root filesystem is read-only).
    """
    if size is None:
        return resources
    filled = {section: dict(values) for section, values in resources.items()}
    filled.setdefault("requests", {})[EPHEMERAL_STORAGE] = size
    if EPHEMERAL_STORAGE in filled.get("limits", {}):
        filled["limits"][EPHEMERAL_STORAGE] = size
    return filled


def _total_size(sizes: list[str | None]) -> str | None:
    """The emptyDirs an init container fills, together (one size as written)."""
    given = [size for size in sizes if size is not None]
    if len(given) <= 1:
        return given[0] if given else None
    return format_bytes(sum(parse_bytes(size) for size in given))


def _model_volume(spec: ServiceSpec) -> dict[str, Any] | None:
    """The volume of the model's files; None for an external server's model (its files are
    the server's)."""
    model = spec.model
    if not model.has_files:
        return None
    if model.pvc is not None:
        return {
            "name": "models",
            "persistentVolumeClaim": {"claimName": model.pvc.claim_name, "readOnly": True},
        }
    size = model.image.size_limit if model.image is not None else model.storage_size_limit
    return {"name": "models", "emptyDir": {"sizeLimit": str(size)}}


def _models_mount(spec: ServiceSpec) -> dict[str, Any]:
    """Where a container sees the model's files (cachefleet's, and Triton's beside it)."""
    mount: dict[str, Any] = {"name": "models", "mountPath": MODEL_DIR}
    pvc = spec.model.pvc
    if pvc is not None:
        mount["readOnly"] = True
        if pvc.sub_path:
            mount["subPath"] = pvc.sub_path
    return mount


def _server_container(spec: ServiceSpec, owner: Owner, runtime_image: str) -> dict[str, Any]:
    runtime = spec.runtime
    resources = runtime.resources.as_dict()
    if runtime.gpus:
        resources.setdefault("limits", {})[GPU_RESOURCE] = runtime.gpus
    env = []
    for name, ref in (
        (PASSWORD_ENV, redis_password_ref(spec, owner=owner)),
        (CACHE_SECRET_ENV, cache_secret_ref(spec, owner=owner)),
    ):
        if ref is not None:
            env.append(
                {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}
            )
    env += _restriction_env(spec, owner)
    env += tracing_env(runtime.tracing, owner=owner)
    https = runtime.tls is not None
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if spec.model.has_files:
        mounts.append(_models_mount(spec))
    command = ["cachefleet", "serve", "--config", f"{CONFIG_DIR}/config.yaml"]
    startup_failures = 60
    if spec.server is None:
        command += ["--model-repository", MODEL_DIR]
    else:
        command += upstream.upstream_arguments(spec.server, model_dir=MODEL_DIR)
        env += upstream.upstream_env(spec.server)
        mounts += upstream.ca_mounts(spec.server)
        startup_failures = upstream.STARTUP_FAILURES
    if https:
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    return {
        "name": "server",
        "image": runtime.image or runtime_image,
        "imagePullPolicy": runtime.image_pull_policy,
        "command": command,
        "env": env,
        "ports": [
            {"name": "http", "containerPort": RUNTIME_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": RUNTIME_GRPC_PORT, "protocol": "TCP"},
        ],
        "resources": resources,
        "securityContext": container_security(),
        "readinessProbe": _http_probe("/v2/health/ready", period_s=5, failures=3, https=https),
        "livenessProbe": _http_probe("/v2/health/live", period_s=10, failures=6, https=https),
        "startupProbe": _http_probe(
            "/v2/health/live", period_s=5, failures=startup_failures, https=https
        ),
        "volumeMounts": mounts,
    }


def _restriction_env(spec: ServiceSpec, owner: Owner) -> list[dict[str, Any]]:
    """The restricted admin APIs, over HTTP and gRPC, with the token from the admin Secret.

    The token is read into its own variable and put into the restriction by Kubernetes'
    ``$(VAR)`` expansion, so that it never appears in the pod template.
    """
    groups = spec.runtime.restricted_apis
    if not groups:
        return []
    secret = {"name": meta.cache_secret_name(owner), "key": ADMIN_TOKEN_KEY}
    restriction = f"{','.join(groups)}:{ADMIN_HEADER}=$({ADMIN_TOKEN_ENV})"
    return [
        {"name": ADMIN_TOKEN_ENV, "valueFrom": {"secretKeyRef": secret}},
        {"name": "CACHEFLEET_HTTP_RESTRICTED_API", "value": restriction},
        {"name": "CACHEFLEET_GRPC_RESTRICTED_PROTOCOL", "value": restriction},
    ]


def _http_probe(path: str, *, period_s: int, failures: int, https: bool) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http", "scheme": "HTTPS" if https else "HTTP"},
        "periodSeconds": period_s,
        "timeoutSeconds": 3,
        "failureThreshold": failures,
    }
