"""The CachedInferenceService spec as typed, defaulted settings.

The CRD's schema does the same defaulting on the server; repeating it here means ``render`` on a
file and the operator on a stored object see the same values. Field names follow the CRD
(camelCase aliases).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.unknown_fields import validate_known
from cachefleet.runtime.config import (
    NAMESPACE_PATTERN,
    ApiGroup,
    CacheMode,
    QuantityError,
    StorageUri,
    StorageUriError,
    parse_bytes,
    parse_storage_uri,
    split_password,
)

PullPolicy = Literal["Always", "IfNotPresent", "Never"]
MaxmemoryPolicy = Literal[
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
]
PersistenceMode = Literal["none", "rdb", "aof", "rdb+aof"]
#: fixed: the pods run as the images' users (runtime 10001, Redis 999); platform: the ids are
#: left to the platform (OpenShift's SCCs assign them from the namespace's range).
UserIds = Literal["fixed", "platform"]
Quantity = str | int

# The API server's own quantity syntax (the CRD's pattern): a value the operator passes through
# unparsed (resources, claim size) is checked here, so a bad one stalls with a message instead of
# failing every apply with the server's 422.
_KUBE_QUANTITY = re.compile(
    r"[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)


def _kube_quantity(value: Any) -> Any:
    valid = (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, str) and _KUBE_QUANTITY.fullmatch(value) is not None
    )
    if not valid:
        raise ValueError(f"{value!r} is not a Kubernetes quantity (write e.g. 500m, 2, 4Gi)")
    return value


KubeQuantity = Annotated[str | int, BeforeValidator(_kube_quantity)]

DEFAULT_REDIS_IMAGE = "redis:7.4-alpine"


class _Spec(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class SecretKeyRef(_Spec):
    """A key of a Secret in the service's namespace."""

    name: str = Field(min_length=1)
    key: str = "password"


class PvcSource(_Spec):
    claim_name: str = Field(min_length=1)
    sub_path: str = ""

    @model_validator(mode="after")
    def _relative(self) -> PvcSource:
        if self.sub_path.startswith("/") or ".." in self.sub_path.split("/"):
            raise ValueError("model.repository.pvc.subPath must be a relative path without '..'")
        return self


DEFAULT_MODEL_SIZE_LIMIT = "10Gi"


class ImageSource(_Spec):
    image: str = Field(min_length=1)
    path: str = "/models"
    pull_policy: PullPolicy = "IfNotPresent"
    #: The most the copied repository may take on the node (the model volume's sizeLimit): past
    #: it the kubelet evicts the pod rather than fill the node's disk.
    size_limit: KubeQuantity = DEFAULT_MODEL_SIZE_LIMIT


class Repository(_Spec):
    pvc: PvcSource | None = None
    image: ImageSource | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Repository:
        if (self.pvc is None) == (self.image is None):
            raise ValueError("set exactly one of model.repository.pvc or model.repository.image")
        return self


def _size_bytes(value: str | int) -> int:
    """A size the fetch command reads as well as the kubelet (``500m`` is a quantity, not a
    byte count)."""
    try:
        return parse_bytes(value)
    except QuantityError as error:
        raise ValueError(f"model.storageSizeLimit: {error}") from None


class Model(_Spec):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    cache_all_models: bool = False
    #: Cache each row of a batched request on its own (the model's rows must be independent).
    row_cache: bool = False
    repository: Repository | None = None
    #: s3://, gs://, https:// (downloaded by an init container) or pvc:// (mounted); exactly one
    #: of it and ``repository``.
    storage_uri: str | None = None
    #: A Secret with the store's credentials, under the keys KServe's storage initializer reads.
    storage_secret_name: str | None = Field(None, min_length=1)
    #: The most the downloaded repository may take on the node (the model emptyDir's sizeLimit),
    #: and the most ``fetch-model`` writes (its ``--max-bytes``): it stops before the kubelet
    #: would evict the pod.
    storage_size_limit: KubeQuantity = DEFAULT_MODEL_SIZE_LIMIT

    @model_validator(mode="after")
    def _one_source(self) -> Model:
        # At most one here; at least one unless the server is external (``ServiceSpec``).
        if self.repository is not None and self.storage_uri is not None:
            raise ValueError("set exactly one of model.storageUri or model.repository")
        if self.storage_uri is None:
            if self.storage_secret_name is not None:
                raise ValueError("model.storageSecretName is read only with model.storageUri")
            return self
        try:
            uri = parse_storage_uri(self.storage_uri)
        except StorageUriError as error:
            raise ValueError(f"model.storageUri {error}") from None
        if not uri.downloaded and self.storage_secret_name is not None:
            raise ValueError(
                "model.storageSecretName is not read for a pvc:// storageUri (the claim is "
                "mounted): remove it"
            )
        if uri.downloaded and _size_bytes(self.storage_size_limit) <= 0:
            raise ValueError("model.storageSizeLimit must be more than 0 bytes (e.g. 10Gi)")
        return self

    @property
    def download(self) -> StorageUri | None:
        """The URI an init container downloads; None for a claim or an image."""
        if self.storage_uri is None:
            return None
        uri = parse_storage_uri(self.storage_uri)
        return uri if uri.downloaded else None

    @property
    def has_files(self) -> bool:
        """Whether the spec names the model's files (not so for an external server's model)."""
        return self.repository is not None or self.storage_uri is not None

    @property
    def pvc(self) -> PvcSource | None:
        """The claim the repository is mounted from: ``repository.pvc`` or a pvc:// URI."""
        if self.repository is not None:
            return self.repository.pvc
        if self.storage_uri is None:
            return None
        uri = parse_storage_uri(self.storage_uri)
        if uri.downloaded:
            return None
        return PvcSource(claim_name=uri.location, sub_path=uri.path)

    @property
    def image(self) -> ImageSource | None:
        return self.repository.image if self.repository is not None else None


class Resources(_Spec):
    requests: dict[str, KubeQuantity] = {}
    limits: dict[str, KubeQuantity] = {}

    def as_dict(self) -> dict[str, Any]:
        return {k: dict(v) for k, v in (("requests", self.requests), ("limits", self.limits)) if v}


#: The admin API groups the operator restricts unless told otherwise (Triton's names, + cache).
DEFAULT_RESTRICTED_APIS: tuple[ApiGroup, ...] = ("model-repository", "shared-memory", "cache")


class RuntimeTls(_Spec):
    #: A kubernetes.io/tls Secret (tls.crt, tls.key; ca.crt for client certificates, if any).
    secret_name: str = Field(min_length=1)
    #: gRPC clients must present a certificate signed by the Secret's ca.crt.
    mutual: bool = False


#: Labels the operator selects its pods by, and the annotation prefix it keeps for itself: a
#: podLabels or podAnnotations entry may not take them.
RESERVED_LABELS = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/component",
    "app.kubernetes.io/managed-by",
)
RESERVED_ANNOTATION_PREFIX = "cachefleet.io/"


class LocalObjectReference(_Spec):
    """A Secret in the service's namespace, by name (as a pod's imagePullSecrets entry)."""

    name: str = Field(min_length=1)


TraceSampler = Literal[
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
]
# A resource attribute key as OTEL_RESOURCE_ATTRIBUTES carries it unencoded.
_RESOURCE_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")


class HeadersSecretRef(SecretKeyRef):
    key: str = "headers"


class Tracing(_Spec):
    """OpenTelemetry tracing of the runtime pods, given to them as the standard OTEL_* variables."""

    #: The collector's OTLP/HTTP base URL (the exporter adds /v1/traces).
    endpoint: str = Field(pattern=r"^https?://[^\s]+$")
    sampler: TraceSampler = "parentbased_always_on"
    #: The sampled share of traces, for the ratio samplers only.
    ratio: float | None = Field(None, ge=0, le=1)
    #: service.name of the spans; None: the service's own name.
    service_name: str | None = Field(None, min_length=1)
    resource_attributes: dict[str, str] = {}
    #: A Secret key holding OTLP headers (``name=value,...``, e.g. an API key) for the collector.
    headers_secret_ref: HeadersSecretRef | None = None

    @model_validator(mode="after")
    def _ratio_for_ratio_samplers(self) -> Tracing:
        if self.ratio is not None and not self.sampler.endswith("traceidratio"):
            raise ValueError(
                "runtime.tracing.ratio is read only by the samplers traceidratio and "
                "parentbased_traceidratio"
            )
        bad = sorted(k for k in self.resource_attributes if not _RESOURCE_KEY.fullmatch(k))
        if bad:
            raise ValueError(
                f"runtime.tracing.resourceAttributes keys {bad}: use letters, digits, "
                "'.', '_', '/' and '-'"
            )
        return self


class Runtime(_Spec):
    #: None: the runtime image of the operator's own release (see ``release.py``). No default is
    #: stored: an API server stores a default once, at create, and the image would never follow
    #: an operator upgrade again.
    image: str | None = Field(None, min_length=1)
    image_pull_policy: PullPolicy = "IfNotPresent"
    gpus: int = Field(0, ge=0)
    execution_provider: Literal["auto", "cpu", "cuda", "tensorrt"] = "auto"
    workers: int = Field(1, ge=1)
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    resources: Resources = Resources()
    node_selector: dict[str, str] = {}
    tolerations: list[dict[str, Any]] = []
    affinity: dict[str, Any] = {}
    restricted_apis: tuple[ApiGroup, ...] = DEFAULT_RESTRICTED_APIS
    tls: RuntimeTls | None = None
    #: The pods' ServiceAccount (None: the namespace's default); its token is still not mounted.
    service_account_name: str | None = Field(None, min_length=1)
    topology_spread_constraints: list[dict[str, Any]] = []
    pod_annotations: dict[str, str] = {}
    pod_labels: dict[str, str] = {}
    tracing: Tracing | None = None

    @model_validator(mode="after")
    def _probes_stay_open(self) -> Runtime:
        # The kubelet's probes carry no token: restricting health fails every probe, and the
        # fleet never becomes ready (the CRD refuses it too; this catches what got past it).
        if "health" in self.restricted_apis:
            raise ValueError(
                "runtime.restrictedApis must not hold health: the pods' probes carry no token, "
                "so every probe would fail"
            )
        return self

    @model_validator(mode="after")
    def _own_keys_stay_own(self) -> Runtime:
        taken = sorted(set(self.pod_labels) & set(RESERVED_LABELS))
        if taken:
            raise ValueError(
                f"runtime.podLabels must not set {', '.join(taken)}: the operator's selectors "
                "use them"
            )
        own = sorted(k for k in self.pod_annotations if k.startswith(RESERVED_ANNOTATION_PREFIX))
        if own:
            raise ValueError(
                f"runtime.podAnnotations must not set {', '.join(own)}: the "
                f"{RESERVED_ANNOTATION_PREFIX} prefix is the operator's"
            )
        return self


class Persistence(_Spec):
    mode: PersistenceMode = "none"
    size: KubeQuantity | None = None
    storage_class_name: str | None = None
    save: str = "3600 1 300 100 60 10000"
    appendfsync: Literal["always", "everysec", "no"] = "everysec"
    retain_on_delete: bool = False

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @model_validator(mode="after")
    def _size_when_on(self) -> Persistence:
        if self.enabled and self.size is None:
            raise ValueError(
                "cache.redis.persistence.size is required when persistence.mode is not none"
            )
        return self


class Auth(_Spec):
    enabled: bool = True
    password_secret_ref: SecretKeyRef | None = None


RedisMode = Literal["standalone", "cluster", "sentinel"]


class ExternalRedis(_Spec):
    url: str = Field(pattern=r"^(redis|rediss|unix)://.+")
    password_secret_ref: SecretKeyRef | None = None
    #: standalone: one Redis; cluster: url is a seed node of a Redis Cluster; sentinel: url is a
    #: Sentinel and sentinel_master the monitored primary's name.
    mode: RedisMode = "standalone"
    sentinel_master: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _mode_fields(self) -> ExternalRedis:
        if (self.mode == "sentinel") != (self.sentinel_master is not None):
            raise ValueError(
                "cache.redis.external.sentinelMaster is required in mode sentinel, "
                "and only read there"
            )
        if self.mode != "standalone" and self.url.startswith("unix://"):
            raise ValueError(
                "cache.redis.external.url must be redis:// or rediss:// in modes cluster "
                "and sentinel"
            )
        if split_password(self.url)[1] is not None:
            # It would sit in the object and in the runtime's ConfigMap for anyone to read.
            raise ValueError(
                "cache.redis.external.url carries a password: put it in a Secret and name it "
                "in cache.redis.external.passwordSecretRef"
            )
        return self


class Switch(_Spec):
    enabled: bool = True


class NetworkPolicySwitch(Switch):
    operator_namespace: str | None = None
    """None: the namespace the operator runs in (``render`` assumes cachefleet-system)."""


DEFAULT_REDIS_RESOURCES = Resources(
    requests={"cpu": "100m", "memory": "1Gi"}, limits={"memory": "1Gi"}
)


class Redis(_Spec):
    external: ExternalRedis | None = None
    image: str | None = None
    resources: Resources | None = None
    maxmemory: Quantity | None = None
    maxmemory_policy: MaxmemoryPolicy = "allkeys-lru"
    persistence: Persistence | None = None
    auth: Auth | None = None
    network_policy: NetworkPolicySwitch = NetworkPolicySwitch()
    disruption_budget: Switch = Switch()

    @model_validator(mode="after")
    def _external_or_managed(self) -> Redis:
        managed = ("image", "resources", "maxmemory", "persistence", "auth")
        if self.external is not None and any(getattr(self, f) is not None for f in managed):
            raise ValueError(
                "cache.redis.external cannot be combined with managed-Redis settings "
                "(image, resources, maxmemory, persistence, auth): remove them, or remove external"
            )
        return self

    @property
    def image_or_default(self) -> str:
        return self.image or DEFAULT_REDIS_IMAGE

    @property
    def resources_or_default(self) -> Resources:
        return self.resources or DEFAULT_REDIS_RESOURCES

    @property
    def persistence_or_default(self) -> Persistence:
        return self.persistence or Persistence()

    @property
    def auth_or_default(self) -> Auth:
        return self.auth or Auth()


class CacheSecretRef(SecretKeyRef):
    key: str = "cache-secret"


class LocalCache(_Spec):
    size: Quantity = "256Mi"


class Cache(_Spec):
    #: The runtime's own ``--cache`` modes (one definition: ``runtime.config``).
    mode: CacheMode = "tiered"
    admission: Literal["auto", "always"] = "auto"
    ttl: Quantity = "1h"
    local: LocalCache = LocalCache()
    redis: Redis = Redis()
    #: The fleet's share of Redis; None: ``<namespace>/<name>`` of the service.
    namespace: str | None = None
    #: The Secret key holding the entries' MAC key; None: one generated for this service.
    secret_ref: CacheSecretRef | None = None

    @field_validator("namespace")
    @classmethod
    def _usable_namespace(cls, namespace: str | None) -> str | None:
        if namespace is not None and NAMESPACE_PATTERN.fullmatch(namespace) is None:
            raise ValueError(
                f"cache.namespace {namespace!r}: use letters, digits, '.', '_', '-' and '/', "
                "starting with a letter or digit, at most 320 characters"
            )
        return namespace

    @property
    def uses_redis(self) -> bool:
        return self.mode in ("redis", "tiered")

    @property
    def managed_redis(self) -> bool:
        """True when the operator runs Redis itself (a Redis mode without an external URL)."""
        return self.uses_redis and self.redis.external is None


ScalingMetric = Literal["cpu", "misses", "queue", "forwarded"]
ScalingEngine = Literal["hpa", "keda"]


class Prometheus(_Spec):
    """Where KEDA reads the metrics the runtime exports (and what it asks)."""

    server_address: str = Field(min_length=1)
    #: Replaces the rendered scaling query (its value is divided by ``target`` per pod).
    query: str | None = Field(None, min_length=1)
    #: The service's request rate measured in front of the pods: what wakes a fleet at zero
    #: (at zero pods the runtime reports nothing). Required with ``minReplicas: 0``.
    activation_query: str | None = Field(None, min_length=1)
    #: The activation query's value above which the fleet leaves zero.
    activation_threshold: float = Field(0, ge=0)


class Autoscaling(_Spec):
    min_replicas: int = Field(1, ge=0)
    max_replicas: int = Field(ge=1)
    #: cpu: utilisation of the CPU request; misses: cache misses per second per pod (what the
    #: model actually runs); queue: requests in flight per pod; forwarded: calls forwarded to
    #: the pod's Triton per second (``spec.server`` kind triton: what reaches its GPUs).
    metric: ScalingMetric = "cpu"
    #: The value per pod to keep misses, queue or forwarded at (not for cpu).
    target: float | None = Field(None, ge=0.001)
    target_cpu_utilization_percentage: int = Field(
        70, ge=1, le=100, alias="targetCPUUtilizationPercentage"
    )
    #: hpa: a HorizontalPodAutoscaler (Pods metrics from a metrics adapter for misses and
    #: queue); keda: a KEDA ScaledObject reading Prometheus (the only way to scale to zero).
    engine: ScalingEngine = "hpa"
    prometheus: Prometheus | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Autoscaling:
        problems = autoscaling_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def autoscaling_problems(scaling: Autoscaling) -> list[str]:
    """What makes an autoscaling spec unusable (the CRD's CEL rules say the same)."""
    problems = []
    if scaling.min_replicas > scaling.max_replicas:
        problems.append("autoscaling.minReplicas must not exceed autoscaling.maxReplicas")
    if scaling.metric == "cpu" and scaling.target is not None:
        problems.append(
            "autoscaling.target is for metric misses, queue or forwarded; cpu uses "
            "targetCPUUtilizationPercentage"
        )
    if scaling.metric != "cpu" and scaling.target is None:
        problems.append(
            "autoscaling.metric misses, queue or forwarded needs autoscaling.target (per pod)"
        )
    if scaling.engine == "hpa":
        if scaling.min_replicas == 0:
            problems.append("autoscaling.minReplicas 0 needs autoscaling.engine keda")
        if scaling.prometheus is not None:
            problems.append(
                "autoscaling.prometheus is read by engine keda only (an HPA reads a metrics "
                "adapter)"
            )
        return problems
    needs_prometheus = scaling.metric != "cpu" or scaling.min_replicas == 0
    if needs_prometheus and scaling.prometheus is None:
        problems.append(
            "autoscaling with engine keda needs autoscaling.prometheus.serverAddress for metric "
            "misses, queue or forwarded and for minReplicas 0"
        )
    if scaling.min_replicas == 0 and (
        scaling.prometheus is None or scaling.prometheus.activation_query is None
    ):
        problems.append(
            "autoscaling.minReplicas 0 needs autoscaling.prometheus.activationQuery: the "
            "service's request rate measured in front of the pods (at zero pods they report "
            "nothing)"
        )
    return problems


ServerKind = Literal["triton", "external"]
#: ``server.url`` (the runtime's ``--upstream``): KServe v2 gRPC or HTTP, HOST:PORT (no path,
#: no credentials: those go in ``authSecretRef``).
SERVER_URL_PATTERN = r"^(grpc|grpcs|http|https)://[^\s/@]+:[0-9]{1,5}/?$"
DEFAULT_AUTH_HEADER = "Authorization"
_TRITON_FIELDS = ("image", "image_pull_policy", "args", "resources", "gpus", "env")
_EXTERNAL_FIELDS = ("url", "auth_secret_ref", "auth_header", "tls")
#: The schemes of ``server.url`` that speak TLS (where ``server.tls`` is read).
TLS_SCHEMES = ("grpcs://", "https://")
#: tritonserver options the operator sets (the shared repository, the loopback ports the
#: cachefleet container reaches): ``server.args`` may not set them again.
OWNED_TRITON_OPTIONS = (
    "--model-repository",
    "--model-store",
    "--model-control-mode",
    "--http-address",
    "--http-port",
    "--grpc-address",
    "--grpc-port",
    "--metrics-port",
)


class AuthSecretRef(_Spec):
    """The Secret key of an auth value (no default key: the value is a whole header's)."""

    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


class CaConfigMapRef(_Spec):
    """A key of a ConfigMap in the service's namespace holding PEM CA certificates."""

    name: str = Field(min_length=1)
    key: str = Field("ca.crt", min_length=1)


class ServerTls(_Spec):
    """How cachefleet checks an external server's certificate (kind external, grpcs:// or
    https:// only). Without it the image's public CAs check it.

    A ConfigMap, not a Secret: a CA certificate is public, and the tools that hand CA bundles
    out in a cluster write ConfigMaps (``kube-root-ca.crt``, cert-manager's trust-manager
    Bundles, OpenShift's injected trusted CA bundle, KServe's own ``cabundle`` for storage).
    """

    ca_config_map_ref: CaConfigMapRef


class EnvVar(_Spec):
    """A variable of the Triton container: a value, or a Kubernetes ``valueFrom`` as written."""

    name: str = Field(min_length=1, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
    value: str | None = None
    value_from: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_value(self) -> EnvVar:
        if self.value is not None and self.value_from is not None:
            raise ValueError(f"server.env {self.name}: set value or valueFrom, not both")
        return self

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class Server(_Spec):
    """The model server the fleet fronts: the runtime pods serve its models through the cache
    (the runtime's upstream mode) instead of running models of their own.

    triton: a Triton container beside cachefleet's in every runtime pod, loading the model
    repository both containers mount; external: an existing KServe v2 server at ``url``.
    """

    kind: ServerKind
    #: triton: the tritonserver image (e.g. nvcr.io/nvidia/tritonserver:24.08-py3).
    image: str | None = Field(None, min_length=1)
    #: triton: None is IfNotPresent.
    image_pull_policy: PullPolicy | None = None
    #: triton: more tritonserver arguments, after the ones the operator sets.
    args: list[str] = []
    #: triton: the Triton container's resources (cachefleet's are ``runtime.resources``).
    resources: Resources | None = None
    #: triton: nvidia.com/gpu of the Triton container.
    gpus: int | None = Field(None, ge=0)
    env: list[EnvVar] = []
    #: external: grpc://, grpcs://, http:// or https:// HOST:PORT of the server.
    url: str | None = Field(None, pattern=SERVER_URL_PATTERN)
    #: external: a Secret key whose value is sent as the ``authHeader`` with every call.
    auth_secret_ref: AuthSecretRef | None = None
    #: external: the header (gRPC metadata key) the Secret's value goes in.
    auth_header: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]+$")
    #: external, grpcs:// or https:// only: a private CA that signed the server's certificate.
    tls: ServerTls | None = None

    @model_validator(mode="after")
    def _fields_of_the_kind(self) -> Server:
        others = _EXTERNAL_FIELDS if self.kind == "triton" else _TRITON_FIELDS
        given = [f for f in others if getattr(self, f) not in (None, [])]
        if given:
            names = ", ".join(f"server.{to_camel(f)}" for f in given)
            other = "external" if self.kind == "triton" else "triton"
            raise ValueError(
                f"{names}: read for server kind {other} only (this one is {self.kind}): remove"
            )
        if self.kind == "triton" and self.image is None:
            raise ValueError("server kind triton needs server.image (a tritonserver image)")
        if self.kind == "external" and self.url is None:
            raise ValueError(
                "server kind external needs server.url (grpc://, grpcs://, http:// or "
                "https://HOST:PORT of the KServe v2 server)"
            )
        owned = sorted({o for a in self.args for o in OWNED_TRITON_OPTIONS if a.split("=")[0] == o})
        if owned:
            raise ValueError(
                f"server.args must not set {', '.join(owned)}: the operator sets them (the "
                "shared model repository and the loopback ports cachefleet reaches Triton on)"
            )
        if self.auth_header is not None and self.auth_secret_ref is None:
            raise ValueError("server.authHeader is read only with server.authSecretRef")
        if self.tls is not None and self.url is not None and not self.url.startswith(TLS_SCHEMES):
            raise ValueError(
                "server.tls needs a grpcs:// or https:// server.url (a grpc:// or http:// "
                "server is dialled without TLS, so no CA would check it)"
            )
        return self

    @property
    def auth_header_or_default(self) -> str:
        return self.auth_header or DEFAULT_AUTH_HEADER

    @property
    def image_pull_policy_or_default(self) -> PullPolicy:
        return self.image_pull_policy or "IfNotPresent"

    @property
    def gpus_or_default(self) -> int:
        return self.gpus or 0


class ServiceSpec(_Spec):
    """The whole spec of a CachedInferenceService."""

    replicas: int = Field(1, ge=0)
    model: Model
    #: Registry credentials for every pod of the service (runtime, model copy, Redis).
    image_pull_secrets: list[LocalObjectReference] = []
    #: None: the operator's own setting (the chart's openshift value).
    user_ids: UserIds | None = None
    runtime: Runtime = Runtime()
    cache: Cache = Cache()
    autoscaling: Autoscaling | None = None
    #: The model server the fleet fronts; None: the runtime runs the model itself.
    server: Server | None = None

    @model_validator(mode="after")
    def _server_fits(self) -> ServiceSpec:
        problems = server_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _cpu_request_for_autoscaling(self) -> ServiceSpec:
        scaling = self.autoscaling
        if scaling is None:
            return self
        if scaling.metric == "cpu" and "cpu" not in self.runtime.resources.requests:
            raise ValueError(
                "autoscaling scales on CPU utilisation, so it needs runtime.resources.requests.cpu"
            )
        if scaling.metric != "cpu" and self.runtime.workers > 1:
            raise ValueError(
                f"autoscaling.metric {scaling.metric} needs runtime.workers 1: each worker "
                "process has its own metrics, and a scrape sees only the one that answers"
            )
        return self


def server_problems(spec: ServiceSpec) -> list[str]:
    """What makes ``spec.server`` unusable with the rest of the spec (the CRD's CEL rules say
    the same)."""
    server = spec.server
    external = server is not None and server.kind == "external"
    problems = []
    forwarded = spec.autoscaling is not None and spec.autoscaling.metric == "forwarded"
    if forwarded and (server is None or server.kind != "triton"):
        problems.append(
            "autoscaling.metric forwarded needs server kind triton: it scales the pods on what "
            "reaches their own Triton (an external server's load does not fall with more "
            "cachefleet pods; scale it where it runs)"
        )
    if external and spec.model.has_files:
        problems.append(
            "server kind external serves the external server's models: remove "
            "model.storageUri and model.repository"
        )
    if not external and not spec.model.has_files:
        problems.append(
            "set exactly one of model.storageUri or model.repository (only a server of kind "
            "external needs neither)"
        )
    if server is not None and spec.runtime.gpus:
        problems.append(
            "runtime.gpus must be 0 with a server: the model runs on the server (server.gpus "
            "for kind triton), not in cachefleet's container"
        )
    return problems


@dataclass(frozen=True)
class ReadSpec:
    """A validated spec and the fields of the stored object this operator does not know."""

    spec: ServiceSpec
    #: Paths such as ``spec.cache.newField``: left out, for the caller to warn about.
    ignored: tuple[str, ...] = ()
    #: For an ignored path close to a known field (a typo: ``spec.cache.mdoe``), that field's
    #: path (``spec.cache.mode``).
    suggested: Mapping[str, str] = field(default_factory=dict)

    def describe_ignored(self) -> str:
        """The ignored paths, each with its "did you mean", for a warning."""
        return ", ".join(
            f"{path} (did you mean {self.suggested[path]}?)" if path in self.suggested else path
            for path in self.ignored
        )


def read_spec(spec: object) -> ReadSpec:
    """Validate and default a spec, leaving out (and naming) fields this release does not know,
    or raise SpecError naming every wrong field.

    Unknown fields come from a newer release's CRD (applied before this operator, or kept after
    a rollback): refusing them would stall every service, so they are ignored with a warning.
    Known fields are validated as strictly as ever."""
    if not isinstance(spec, Mapping):  # a server without the CRD's schema stores anything
        kind = type(spec).__name__
        raise SpecError(f"spec must be an object with fields (model, replicas, ...), not a {kind}")
    try:
        suggested: dict[str, str] = {}
        parsed, ignored = validate_known(
            ServiceSpec, dict(spec), prefix="spec.", suggested=suggested
        )
    except ValidationError as error:
        raise SpecError(_describe(error)) from None
    return ReadSpec(parsed, ignored, suggested)


def parse_spec(spec: object) -> ServiceSpec:
    """Validate and default a spec (unknown fields left out), or raise SpecError."""
    return read_spec(spec).spec


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"])
        message = str(item["msg"]).removeprefix("Value error, ")
        problems.append(f"spec.{where}: {message}" if where else message)
    return "; ".join(problems)
