"""The runtime's settings: one typed model, grouped by concern.

The operator renders this same model into the runtime's ConfigMap, so a field added here is
available on both sides with one definition. Units are in the field names (``_s``, ``_bytes``).
Secrets (the Redis password) are excluded from every dump, so they can never reach a ConfigMap.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    field_validator,
    model_validator,
)

from cachefleet.runtime.config.quantity import parse_bytes, parse_duration_s
from cachefleet.runtime.config.redaction import redact, split_password
from cachefleet.runtime.config.restrictions import Restrictions

Bytes = Annotated[int, BeforeValidator(parse_bytes), Field(ge=0)]
Seconds = Annotated[float, BeforeValidator(parse_duration_s), Field(ge=0)]
CacheMode = Literal["none", "local", "redis", "tiered"]
#: Fleet-wide coalescing of identical misses through a Redis lease: ``auto`` for the models
#: whose measured compute time makes waiting for another replica worth it, ``off`` never.
FleetCoalescing = Literal["auto", "off"]
#: auto: a tier that costs a model more than it saves is skipped for it; always: never skipped.
CacheAdmission = Literal["auto", "always"]
#: How the shared tier is deployed: one server, a Redis Cluster (sharded), or a primary with
#: replicas behind Sentinel.
RedisMode = Literal["standalone", "cluster", "sentinel"]
ExecutionProvider = Literal["auto", "cpu", "cuda", "tensorrt"]
ModelControlMode = Literal["none", "explicit"]
#: The cache namespace of a server that names none.
DEFAULT_NAMESPACE = "default"
#: What a cache namespace may hold: no ``:`` (it would make Redis keys ambiguous), no glob
#: characters (the flush's SCAN pattern) and no braces (a Redis Cluster hash tag would put a
#: whole fleet on one slot). ``<namespace>/<name>`` of a Kubernetes object always fits.
NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,319}")


def _name_list(value: Any) -> Any:
    """``--load-model`` given as a list, or as one comma-separated string (environment)."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def _names(value: Any) -> Any:
    """A comma-separated string (flag, environment) as a list of names; lists pass through."""
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return value


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Group):
    """Where and how the HTTP and gRPC servers listen."""

    host: str = "0.0.0.0"
    port: int = Field(8000, ge=0, le=65535)
    grpc_port: int = Field(
        8001, ge=0, le=65535, description="KServe v2 / Triton gRPC port, as Triton's; 0: off."
    )
    workers: int = Field(1, ge=1, description="Server processes; each loads every model.")
    max_request_bytes: Bytes = Field(64 * 2**20, description="Larger bodies get 413.")
    max_json_bytes: Bytes = Field(
        32 * 2**20,
        gt=0,
        description="JSON text an infer request may carry (its body, or the binary "
        "extension's header), inflated; over it 413. Bounds the time one JSON parse holds "
        "the process.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    strict_readiness: bool = Field(
        True,
        description="Ready only while every model the server was asked to serve is loaded "
        "(as Triton's --strict-readiness); false: ready once the server is up.",
    )


class LimitSettings(_Group):
    """What one client, or many, may hold of the server: deadlines that cut slow clients off,
    caps on connections and requests, and a budget of request bytes in memory. Defaults are
    meant for a pod open to the public; over a limit the answer is a 503 with ``Retry-After``
    or a closed connection, never an out-of-memory kill."""

    head_timeout_s: Seconds = Field(
        10.0, gt=0, description="A request head must arrive whole within this; else closed."
    )
    body_timeout_s: Seconds = Field(
        30.0,
        gt=0,
        description="A body that delivers less than 1 KiB in this long is cut off (closed).",
    )
    body_deadline_s: Seconds = Field(
        60.0,
        gt=0,
        description="A body must arrive whole within this of its head, however steadily it "
        "trickles; else cut off (closed).",
    )
    write_timeout_s: Seconds = Field(
        30.0,
        gt=0,
        description="Answer bytes waiting for a client that does not read them must all be "
        "taken within this; else the connection is reset. Until they are, the answer is "
        "charged to max_inflight_bytes.",
    )
    keep_alive_timeout_s: Seconds = Field(
        5.0,
        gt=0,
        description="An idle keep-alive connection (its last answer complete, no byte of a "
        "next request) is closed after this.",
    )
    max_connections: int = Field(
        1024, ge=1, description="Open HTTP connections; more are answered 503 and closed."
    )
    max_requests_in_flight: int = Field(
        512, ge=1, description="Inference requests being answered (HTTP, and gRPC calls); 503 over."
    )
    max_inflight_bytes: Bytes = Field(
        1024 * 2**20,
        gt=0,
        description="Request bytes held at once (bodies as received and decoded tensors, and "
        "HTTP answers until written); "
        "a request over it waits briefly, then gets 503. The operator derives it from the "
        "memory limit.",
    )
    grpc_max_streams: int = Field(
        16,
        ge=1,
        description="gRPC streams (ModelStreamInfer) open at once; over it a new stream ends "
        "with RESOURCE_EXHAUSTED. Streams are served apart from unary calls and model control.",
    )
    grpc_max_connections: int = Field(
        1024,
        ge=1,
        description="Open gRPC connections (TCP, handshaking or not); more are closed as they "
        "are accepted. With max_connections it must fit the open-file limit (nofile).",
    )
    grpc_handshake_timeout_s: Seconds = Field(
        10.0,
        gt=0,
        description="A gRPC connection must finish its handshake (TLS, then HTTP/2 settings) "
        "within this; else closed.",
    )
    grpc_max_connection_idle_s: Seconds = Field(
        60.0,
        gt=0,
        description="A gRPC connection without a call in progress for this long is closed "
        "(GOAWAY); clients reconnect on their next call.",
    )
    grpc_max_connection_age_s: Seconds = Field(
        3600.0,
        gt=0,
        description="A gRPC connection is asked to go away (GOAWAY) after this long, busy or "
        "not; calls in progress then have grpc_max_connection_age_grace_s to finish.",
    )
    grpc_max_connection_age_grace_s: Seconds = Field(
        300.0,
        ge=0,
        description="How long calls in progress may go on after grpc_max_connection_age_s; "
        "then the connection is closed.",
    )
    grpc_min_ping_interval_s: Seconds = Field(
        300.0,
        gt=0,
        description="Clients' HTTP/2 pings on a connection with calls in progress must keep "
        "this far apart while no data flows (on one without calls, two hours); the third ping "
        "too soon closes the connection (GOAWAY too_many_pings).",
    )
    grpc_max_model_control: int = Field(
        8,
        ge=1,
        description="gRPC model loads and unloads admitted at once, on threads of their own "
        "(they run one at a time, the others wait their turn); more end with "
        "RESOURCE_EXHAUSTED. Health, metadata and inference calls never wait for them.",
    )


class ModelSettings(_Group):
    """The model repository and how models are executed."""

    repository: Path | None = None
    name: str | None = Field(
        None,
        description="Serve a repository that is one model's files (a model.onnx or "
        "config.pbtxt at its top, as KServe's storage initializer leaves them) under this name; "
        "a repository of model folders keeps its folders' names.",
    )
    cache_all_models: bool = Field(
        False, description="Cache every model, even those whose config does not enable it."
    )
    row_cache_models: Annotated[tuple[str, ...], BeforeValidator(_names)] = Field(
        (),
        description="Models whose rows are cached one by one, as their config parameter "
        "cachefleet.row_cache would ask (comma-separated on the command line).",
    )
    execution_provider: ExecutionProvider = Field(
        "auto", description="auto: CUDA when present, else CPU; tensorrt must be asked for."
    )
    intra_op_threads: int = Field(0, ge=0, description="ONNX Runtime intra-op threads; 0: default.")
    inter_op_threads: int = Field(0, ge=0, description="ONNX Runtime inter-op threads; 0: default.")
    control_mode: ModelControlMode = Field(
        "none",
        description="none: load every model at start, no load/unload API; explicit: load the "
        "models named by load_models at start, then as asked through the API.",
    )
    load_models: Annotated[tuple[str, ...], BeforeValidator(_name_list)] = Field(
        (), description="Models to load at start in explicit mode; '*' loads every model."
    )


class CacheSettings(_Group):
    """The response cache: which tiers, how big, how long entries live."""

    mode: CacheMode = "local"
    admission: CacheAdmission = Field(
        "auto",
        description="auto: skip a tier for a model while it costs more than it saves; "
        "always: use every tier for every cached model.",
    )
    local_size_bytes: Bytes = Field(256 * 2**20, description="Bound of the in-process tier.")
    ttl_s: Seconds = Field(3600.0, description="Entry lifetime; a model's config may override it.")
    insert_queue_size: int = Field(1024, ge=1, description="Write-behind queue; drops when full.")
    insert_queue_bytes: Bytes = Field(
        64 * 2**20, gt=0, description="Bytes of answers the write-behind queue may hold."
    )
    namespace: str = Field(
        DEFAULT_NAMESPACE,
        description="The fleet's share of Redis: prefixes every key and names the flush channel.",
    )
    secret: SecretStr | None = Field(
        None, exclude=True, description="Key of the entries' MAC; entries failing it are forged."
    )
    fleet_coalescing: FleetCoalescing = Field(
        "auto",
        description="One computation per fleet for a miss of an expensive model (Redis tiers).",
    )
    fleet_min_compute_s: Seconds = Field(
        0.005,
        description="Models whose measured compute time is below this never wait for the fleet.",
    )
    fleet_max_wait_s: Seconds = Field(
        2.0,
        gt=0,
        description="Bound of a fleet lease and of a replica's wait for another's answer.",
    )

    @field_validator("namespace")
    @classmethod
    def _usable_namespace(cls, namespace: str) -> str:
        if NAMESPACE_PATTERN.fullmatch(namespace) is None:
            raise ValueError(
                f"{namespace!r}: use letters, digits, '.', '_', '-' and '/' (no ':', braces or "
                "glob characters), starting with a letter or digit, at most 320 characters"
            )
        return namespace

    @field_validator("secret")
    @classmethod
    def _long_enough(cls, secret: SecretStr | None) -> SecretStr | None:
        if secret is not None and len(secret.get_secret_value()) < 16:
            raise ValueError("a cache secret needs at least 16 characters")
        return secret


class RedisSettings(_Group):
    """The shared Redis tier. Timeouts are short on purpose: a slow Redis must cost little."""

    url: str | None = None
    mode: RedisMode = Field(
        "standalone",
        description="cluster: url names one seed node; sentinel: url names a Sentinel.",
    )
    sentinel_master: str | None = Field(
        None, min_length=1, description="The primary's name as Sentinel knows it (sentinel mode)."
    )
    password: SecretStr | None = Field(None, exclude=True)
    connect_timeout_s: Seconds = 0.5
    socket_timeout_s: Seconds = 0.1
    pool_size: int = Field(64, ge=1)
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    breaker_failure_threshold: int = Field(
        3, ge=1, description="Consecutive failures that open the circuit breaker."
    )
    breaker_reset_s: Seconds = Field(1.0, description="How long the breaker stays open per probe.")

    @model_validator(mode="before")
    @classmethod
    def _password_out_of_url(cls, data: Any) -> Any:
        """Move a password found in the URL (``user:secret@`` or ``?password=``) into the
        password field, which no dump includes: from here on the URL is safe to log, to put
        in an error, or to hand to worker processes."""
        if not isinstance(data, dict) or not isinstance(data.get("url"), str):
            return data
        url, password = split_password(data["url"])
        if password is None:
            return data
        given = data.get("password")
        if isinstance(given, SecretStr):
            given = given.get_secret_value()
        if given is not None and given != password:
            raise ValueError(
                "the redis url carries a password and --redis-password / "
                "CACHEFLEET_REDIS_PASSWORD gives another: give one of them"
            )
        return {**data, "url": url, "password": SecretStr(password)}

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("redis://", "rediss://", "unix://")):
            shown = redact(url)
            raise ValueError(f"redis url must start with redis://, rediss:// or unix://: {shown!r}")
        return url

    @model_validator(mode="after")
    def _mode_needs(self) -> RedisSettings:
        if self.mode == "sentinel" and self.sentinel_master is None:
            raise ValueError("redis mode sentinel needs --redis-sentinel-master NAME")
        if self.mode != "sentinel" and self.sentinel_master is not None:
            raise ValueError("--redis-sentinel-master is only read in redis mode sentinel")
        if self.mode != "standalone" and self.url is not None and self.url.startswith("unix://"):
            raise ValueError(f"redis mode {self.mode} needs a redis:// or rediss:// url")
        return self


#: The schemes ``--upstream`` takes: KServe v2 gRPC or HTTP (``grpcs``, ``https``: over TLS).
UPSTREAM_SCHEMES = ("grpc://", "grpcs://", "http://", "https://")
_TLS_SCHEMES = ("grpcs://", "https://")


class UpstreamSettings(_Group):
    """Another KServe v2 / Triton server whose models this one serves through its cache
    (``--upstream``): its index, metadata and configs are read from it, a miss is forwarded to
    it. The auth header's value is a secret: excluded from every dump, never logged."""

    url: str | None = Field(
        None,
        description="grpc://HOST:PORT (grpcs:// for TLS), or http:// / https://, of the "
        "upstream server.",
    )
    timeout_s: Seconds = Field(
        30.0, gt=0, description="Deadline of one forwarded inference; past it 503 UNAVAILABLE."
    )
    control_timeout_s: Seconds = Field(
        5.0, gt=0, description="Deadline of one index, config or health call to the upstream."
    )
    refresh_s: Seconds = Field(
        2.0,
        gt=0,
        description="How often the upstream's index, configs and readiness are read again: "
        "the longest a change on the upstream goes unseen.",
    )
    max_in_flight: int = Field(
        64, ge=1, description="Forwarded inferences at once (each holds a thread while it waits)."
    )
    models: Annotated[tuple[str, ...], BeforeValidator(_names)] = Field(
        (),
        description="Models to serve that the upstream's repository index does not list (a "
        "server without the repository extension, or PyTriton's): read from their metadata "
        "and readiness instead (comma-separated on the command line).",
    )
    model_repository: Path | None = Field(
        None,
        description="The upstream's own model repository, when this server sees the same "
        "folder: its files go into every key, as a local model's do.",
    )
    auth_header: str | None = Field(
        None, min_length=1, description="Header (gRPC metadata key) sent with every call."
    )
    auth_value: SecretStr | None = Field(None, exclude=True)
    auth_file: Path | None = Field(
        None, description="File holding the auth header's value (a mounted Secret)."
    )
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    breaker_failure_threshold: int = Field(
        3, ge=1, description="Consecutive unreachable calls that open the upstream's breaker."
    )
    breaker_reset_s: Seconds = Field(1.0, description="How long the breaker stays open per probe.")

    @field_validator("url")
    @classmethod
    def _known_scheme(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(UPSTREAM_SCHEMES):
            shown = redact(url)
            raise ValueError(
                "upstream url must start with grpc://, grpcs:// (the KServe v2 gRPC port, 8001 "
                f"on Triton), http:// or https://: {shown!r}"
            )
        if url is not None and "@" in url:
            raise ValueError("the upstream url carries credentials: use --upstream-auth-file")
        return url

    @field_validator("auth_header")
    @classmethod
    def _metadata_key(cls, header: str | None) -> str | None:
        if header is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", header):
            raise ValueError(f"{header!r} is not a header name (letters, digits, '-', '_', '.')")
        return None if header is None else header.lower()

    @model_validator(mode="after")
    def _auth_and_tls(self) -> UpstreamSettings:
        if self.auth_value is not None and self.auth_file is not None:
            raise ValueError("give the upstream auth value or its file, not both")
        if (self.auth_value is not None or self.auth_file is not None) != (
            self.auth_header is not None
        ):
            raise ValueError(
                "--upstream-auth-header goes with --upstream-auth-file or "
                "CACHEFLEET_UPSTREAM_AUTH_VALUE"
            )
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("--upstream-tls-cert-file and --upstream-tls-key-file go together")
        tls = self.tls_ca_file or self.tls_cert_file
        if tls is not None and self.url is not None and not self.url.startswith(_TLS_SCHEMES):
            raise ValueError("upstream TLS files need a grpcs:// or https:// upstream url")
        return self


class SecuritySettings(_Group):
    """Who may call what, and TLS, with Triton's (and uvicorn's) flag names.

    Restrictions hold secrets: they are excluded from every dump (the ConfigMap the operator
    renders, the JSON handed to workers) and travel like the Redis password, on their own.
    """

    http_restricted_api: Restrictions = Field(
        (), exclude=True, description="Triton's <api>[,<api>...]:<key>=<value>, over HTTP."
    )
    grpc_restricted_protocol: Restrictions = Field(
        (), exclude=True, description="The same over gRPC (metadata triton-grpc-protocol-<key>)."
    )
    grpc_use_ssl: bool = Field(False, description="Serve gRPC over TLS.")
    grpc_use_ssl_mutual: bool = Field(
        False, description="gRPC clients must present a certificate signed by grpc_root_cert."
    )
    grpc_server_cert: Path | None = None
    grpc_server_key: Path | None = None
    grpc_root_cert: Path | None = None
    ssl_certfile: Path | None = Field(None, description="Serve HTTP over TLS with this cert.")
    ssl_keyfile: Path | None = None

    @model_validator(mode="after")
    def _tls_files(self) -> SecuritySettings:
        if self.grpc_use_ssl_mutual and not self.grpc_use_ssl:
            raise ValueError("--grpc-use-ssl-mutual needs --grpc-use-ssl")
        if self.grpc_use_ssl and (self.grpc_server_cert is None or self.grpc_server_key is None):
            raise ValueError("--grpc-use-ssl needs --grpc-server-cert and --grpc-server-key")
        if self.grpc_use_ssl_mutual and self.grpc_root_cert is None:
            raise ValueError("--grpc-use-ssl-mutual needs --grpc-root-cert")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("--ssl-certfile and --ssl-keyfile go together")
        return self


class RuntimeSettings(_Group):
    """Everything `cachefleet serve` needs, as the operator renders it into a ConfigMap."""

    server: ServerSettings = ServerSettings()
    limits: LimitSettings = LimitSettings()
    models: ModelSettings = ModelSettings()
    cache: CacheSettings = CacheSettings()
    redis: RedisSettings = RedisSettings()
    security: SecuritySettings = SecuritySettings()
    upstream: UpstreamSettings = UpstreamSettings()

    def to_document(self) -> dict[str, Any]:
        """The settings as a YAML/JSON-ready mapping, without secrets and with plain types."""
        return self.model_dump(mode="json", exclude_none=True)
