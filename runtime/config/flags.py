"""One table from command-line flags to settings fields, and the layered loader.

Every flag reads, in increasing priority: its default, the ``--config`` YAML file, the
``CACHEFLEET_<FLAG>`` environment variable and the command line. The table is the single place
that names flags; argparse options and environment variables are derived from it.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from cachefleet.runtime.config.settings import RuntimeSettings

ENV_PREFIX = "CACHEFLEET_"
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Flag:
    """A command-line flag bound to ``group.field`` of :class:`RuntimeSettings`."""

    name: str
    group: str
    field: str
    help: str
    choices: tuple[str, ...] | None = None
    is_switch: bool = False
    #: Repeatable on the command line; comma-separated in the environment.
    is_list: bool = False
    metavar: str = "NAME"

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper().replace("-", "_")

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")


FLAGS: tuple[Flag, ...] = (
    Flag("model-repository", "models", "repository", "Triton-layout model repository folder."),
    Flag(
        "model-name",
        "models",
        "name",
        "Serve a repository that is one model's files (a model.onnx or config.pbtxt at its "
        "top, as KServe leaves them) as this model.",
    ),
    Flag("host", "server", "host", "Address to listen on (default 0.0.0.0)."),
    Flag("port", "server", "port", "Port to listen on (default 8000)."),
    Flag("grpc-port", "server", "grpc_port", "gRPC port (default 8001; 0 turns gRPC off)."),
    Flag("workers", "server", "workers", "Server processes (default 1)."),
    Flag("max-request-size", "server", "max_request_bytes", "Body limit, e.g. 64Mi (413 above)."),
    Flag(
        "max-json-size",
        "server",
        "max_json_bytes",
        "JSON text an infer request may carry, inflated, e.g. 8Mi (default; 413 above).",
    ),
    Flag("log-level", "server", "log_level", "debug, info, warning or error."),
    Flag(
        "strict-readiness",
        "server",
        "strict_readiness",
        "Not ready until every model asked for has loaded (default true; as Triton's).",
        is_switch=True,
    ),
    Flag("request-head-timeout", "limits", "head_timeout_s", "Seconds for a whole head (10)."),
    Flag(
        "request-body-timeout",
        "limits",
        "body_timeout_s",
        "Seconds in which a body must deliver 1 KiB, or be cut off (30).",
    ),
    Flag(
        "request-body-deadline",
        "limits",
        "body_deadline_s",
        "Seconds in which a whole body must arrive, or be cut off (60).",
    ),
    Flag(
        "response-write-timeout",
        "limits",
        "write_timeout_s",
        "Seconds in which a client must take an answer waiting for it, or be cut off (30).",
    ),
    Flag("keep-alive-timeout", "limits", "keep_alive_timeout_s", "Idle keep-alive seconds (5)."),
    Flag("max-connections", "limits", "max_connections", "Open HTTP connections (1024)."),
    Flag(
        "max-requests-in-flight",
        "limits",
        "max_requests_in_flight",
        "Inference requests answered at once, HTTP and gRPC each (512); 503 over.",
    ),
    Flag(
        "max-inflight-bytes",
        "limits",
        "max_inflight_bytes",
        "Request bytes held at once, e.g. 1Gi (default); over it, wait briefly, then 503.",
    ),
    Flag(
        "grpc-max-streams",
        "limits",
        "grpc_max_streams",
        "gRPC streams open at once (16); over it RESOURCE_EXHAUSTED.",
    ),
    Flag(
        "grpc-max-connections",
        "limits",
        "grpc_max_connections",
        "Open gRPC connections (1024); more are closed as they are accepted.",
    ),
    Flag(
        "grpc-handshake-timeout",
        "limits",
        "grpc_handshake_timeout_s",
        "Seconds for a gRPC connection's handshake (TLS, HTTP/2 settings) (10).",
    ),
    Flag(
        "grpc-max-connection-idle",
        "limits",
        "grpc_max_connection_idle_s",
        "Seconds a gRPC connection may go without a call before it is closed (60).",
    ),
    Flag(
        "grpc-max-connection-age",
        "limits",
        "grpc_max_connection_age_s",
        "Seconds after which a gRPC connection is asked to go away, busy or not (3600).",
    ),
    Flag(
        "grpc-max-connection-age-grace",
        "limits",
        "grpc_max_connection_age_grace_s",
        "Seconds calls may go on past --grpc-max-connection-age before it closes (300).",
    ),
    Flag(
        "grpc-min-ping-interval",
        "limits",
        "grpc_min_ping_interval_s",
        "Seconds clients' pings must keep apart during calls; a third too soon closes (300).",
    ),
    Flag(
        "grpc-max-model-control",
        "limits",
        "grpc_max_model_control",
        "gRPC model loads/unloads admitted at once (8), apart from other calls; over it "
        "RESOURCE_EXHAUSTED.",
    ),
    Flag("cache", "cache", "mode", "Response cache mode.", ("none", "local", "redis", "tiered")),
    Flag(
        "cache-admission",
        "cache",
        "admission",
        "auto (default): skip a tier for a model while it costs more than it saves; always: never.",
        ("auto", "always"),
    ),
    Flag("local-cache-size", "cache", "local_size_bytes", "In-process cache bound, e.g. 256Mi."),
    Flag("cache-ttl", "cache", "ttl_s", "Entry lifetime: seconds or 30m, 1h (default 3600)."),
    Flag("cache-insert-queue", "cache", "insert_queue_size", "Write-behind queue length."),
    Flag(
        "cache-insert-queue-bytes",
        "cache",
        "insert_queue_bytes",
        "Bytes of answers the write-behind queue may hold, e.g. 64Mi (default).",
    ),
    Flag(
        "cache-namespace",
        "cache",
        "namespace",
        "Fleet namespace: prefixes every Redis key, names the flush channel (default 'default').",
    ),
    Flag(
        "cache-secret",
        "cache",
        "secret",
        "Key of the entries' MAC: entries without a valid one are forged (prefer the environment).",
    ),
    Flag(
        "cache-fleet-coalescing",
        "cache",
        "fleet_coalescing",
        "auto: a miss of an expensive model runs once per fleet, the other replicas wait for"
        " its answer in Redis (redis and tiered modes); off: once per replica.",
        ("auto", "off"),
    ),
    Flag(
        "cache-fleet-min-compute",
        "cache",
        "fleet_min_compute_s",
        "Measured compute time below which a model never waits for the fleet (0.005 s).",
    ),
    Flag(
        "cache-fleet-max-wait",
        "cache",
        "fleet_max_wait_s",
        "Bound of a fleet lease and of a wait for another replica's answer (2 s).",
    ),
    Flag("cache-all-models", "models", "cache_all_models", "Cache every model.", is_switch=True),
    Flag(
        "row-cache-models",
        "models",
        "row_cache_models",
        "Comma-separated models whose rows are cached one by one (as cachefleet.row_cache).",
    ),
    Flag(
        "execution-provider",
        "models",
        "execution_provider",
        "ONNX Runtime provider.",
        ("auto", "cpu", "cuda", "tensorrt"),
    ),
    Flag("intra-op-threads", "models", "intra_op_threads", "ONNX Runtime intra-op threads."),
    Flag("inter-op-threads", "models", "inter_op_threads", "ONNX Runtime inter-op threads."),
    Flag(
        "model-control-mode",
        "models",
        "control_mode",
        "none: load every model, no load/unload API; explicit: load/unload through the API.",
        ("none", "explicit"),
    ),
    Flag(
        "load-model",
        "models",
        "load_models",
        "In explicit mode, a model to load at start (repeatable; '*' for all).",
        is_list=True,
    ),
    Flag("redis-url", "redis", "url", "redis://, rediss:// or unix:// URL of the shared tier."),
    Flag(
        "redis-mode",
        "redis",
        "mode",
        "standalone, cluster (the URL is a seed node) or sentinel (the URL is a Sentinel).",
        ("standalone", "cluster", "sentinel"),
    ),
    Flag("redis-sentinel-master", "redis", "sentinel_master", "Primary's name in sentinel mode."),
    Flag("redis-password", "redis", "password", "Redis password (prefer the environment)."),
    Flag("redis-connect-timeout", "redis", "connect_timeout_s", "Seconds (default 0.5)."),
    Flag("redis-socket-timeout", "redis", "socket_timeout_s", "Seconds per command (default 0.1)."),
    Flag("redis-pool-size", "redis", "pool_size", "Connections per process (default 64)."),
    Flag("redis-tls-ca-file", "redis", "tls_ca_file", "CA bundle for rediss://."),
    Flag("redis-tls-cert-file", "redis", "tls_cert_file", "Client certificate for rediss://."),
    Flag("redis-tls-key-file", "redis", "tls_key_file", "Client key for rediss://."),
    Flag(
        "http-restricted-api",
        "security",
        "http_restricted_api",
        "<api>[,<api>...]:<header-key>=<header-value>, as Triton's (repeatable; newline-"
        "separated in the environment): those APIs need that header.",
        is_list=True,
        metavar="RESTRICTION",
    ),
    Flag(
        "grpc-restricted-protocol",
        "security",
        "grpc_restricted_protocol",
        "The same over gRPC; the metadata key is triton-grpc-protocol-<header-key>.",
        is_list=True,
        metavar="RESTRICTION",
    ),
    Flag("grpc-use-ssl", "security", "grpc_use_ssl", "Serve gRPC over TLS.", is_switch=True),
    Flag("grpc-server-cert", "security", "grpc_server_cert", "gRPC server certificate (PEM)."),
    Flag("grpc-server-key", "security", "grpc_server_key", "gRPC server private key (PEM)."),
    Flag("grpc-root-cert", "security", "grpc_root_cert", "CA that signs gRPC client certs."),
    Flag(
        "grpc-use-ssl-mutual",
        "security",
        "grpc_use_ssl_mutual",
        "gRPC clients must present a certificate signed by --grpc-root-cert.",
        is_switch=True,
    ),
    Flag("ssl-certfile", "security", "ssl_certfile", "Serve HTTP over TLS with this cert (PEM)."),
    Flag("ssl-keyfile", "security", "ssl_keyfile", "Private key of --ssl-certfile (PEM)."),
    Flag(
        "upstream",
        "upstream",
        "url",
        "grpc://HOST:PORT (grpcs:// for TLS; or http://, https://) of a KServe v2 / Triton "
        "server whose models are served through this cache instead of --model-repository.",
        metavar="URL",
    ),
    Flag(
        "upstream-timeout",
        "upstream",
        "timeout_s",
        "Deadline of one forwarded inference, seconds (30); past it 503 UNAVAILABLE.",
    ),
    Flag(
        "upstream-control-timeout",
        "upstream",
        "control_timeout_s",
        "Deadline of one index, config or health call to the upstream, seconds (5).",
    ),
    Flag(
        "upstream-refresh",
        "upstream",
        "refresh_s",
        "Seconds between reads of the upstream's index, configs and readiness (2).",
    ),
    Flag(
        "upstream-max-in-flight",
        "upstream",
        "max_in_flight",
        "Inferences forwarded to the upstream at once (64).",
    ),
    Flag(
        "upstream-models",
        "upstream",
        "models",
        "Comma-separated models to serve that the upstream's repository index does not list.",
    ),
    Flag(
        "upstream-model-repository",
        "upstream",
        "model_repository",
        "The upstream's model repository, where this server sees the same folder: its files "
        "go into every cache key.",
        metavar="DIR",
    ),
    Flag(
        "upstream-auth-header",
        "upstream",
        "auth_header",
        "Header (gRPC metadata key) sent with every upstream call, e.g. authorization.",
    ),
    Flag(
        "upstream-auth-file",
        "upstream",
        "auth_file",
        "File holding that header's value (a mounted Secret); or CACHEFLEET_UPSTREAM_AUTH_VALUE.",
        metavar="FILE",
    ),
    Flag(
        "upstream-auth-value",
        "upstream",
        "auth_value",
        "The auth header's value (prefer the environment or --upstream-auth-file).",
        metavar="VALUE",
    ),
    Flag(
        "upstream-tls-ca-file",
        "upstream",
        "tls_ca_file",
        "CA bundle for a grpcs:// or https:// upstream.",
    ),
    Flag(
        "upstream-tls-cert-file",
        "upstream",
        "tls_cert_file",
        "Client certificate for a TLS upstream.",
    ),
    Flag("upstream-tls-key-file", "upstream", "tls_key_file", "Key of --upstream-tls-cert-file."),
)
_BY_NAME = {flag.name: flag for flag in FLAGS}
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def switch_value(text: str) -> bool:
    """A switch's value written out (``--grpc-use-ssl false``, ``CACHEFLEET_...=true``):
    true/false, yes/no, on/off, 1/0; anything else is refused, never read as false."""
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(f"expected true or false, got {text!r}")


def _switch_argument(text: str) -> bool:
    try:
        return switch_value(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


class SettingsError(ValueError):
    """Settings that cannot be loaded; the message says which source and field are wrong."""


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add ``--config`` and every flag of the table to ``parser`` (all default to None)."""
    parser.add_argument("--config", type=Path, help="YAML settings file (grouped or flag names).")
    for flag in FLAGS:
        help_text = f"{flag.help} [env {flag.env_var}]"
        if flag.is_switch:
            # --X turns it on, --X false|true says which, --no-X turns it off.
            parser.add_argument(
                f"--{flag.name}",
                nargs="?",
                const=True,
                type=_switch_argument,
                metavar="BOOL",
                help=f"{flag.help} [--no-{flag.name}: off; env {flag.env_var}]",
            )
            parser.add_argument(
                f"--no-{flag.name}",
                dest=flag.dest,
                action="store_false",
                default=None,
                help=argparse.SUPPRESS,
            )
        elif flag.is_list:
            parser.add_argument(
                f"--{flag.name}", action="append", metavar=flag.metavar, help=help_text
            )
        else:
            parser.add_argument(f"--{flag.name}", choices=flag.choices, help=help_text)


def load_settings(
    args: argparse.Namespace | None = None,
    environ: Mapping[str, str] | None = None,
) -> RuntimeSettings:
    """Merge defaults, the config file, the environment and the command line, in that order."""
    environ = os.environ if environ is None else environ
    layers: list[dict[str, dict[str, Any]]] = []
    config_path = getattr(args, "config", None) or environ.get(ENV_PREFIX + "CONFIG")
    if config_path:
        layers.append(_read_config_file(Path(config_path)))
    layers.append(_flags_from_environment(environ))
    layers.append(_flags_from_args(args))
    merged: dict[str, dict[str, Any]] = {}
    for layer in layers:
        for group, fields in layer.items():
            merged.setdefault(group, {}).update(fields)
    try:
        return RuntimeSettings.model_validate(merged)
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None


def _flags_from_environment(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Every ``CACHEFLEET_<FLAG>`` set, grouped (several variables may fill one group)."""
    layer: dict[str, dict[str, Any]] = {}
    for flag in FLAGS:
        if flag.env_var in environ:
            layer.setdefault(flag.group, {})[flag.field] = _env_value(flag, environ)
    return layer


def _env_value(flag: Flag, environ: Mapping[str, str]) -> Any:
    raw = environ[flag.env_var]
    if not flag.is_switch:
        return raw
    if not raw.strip():
        return False  # set but empty, as a manifest may leave it: off, as before
    try:
        return switch_value(raw)
    except ValueError as error:
        raise SettingsError(f"{flag.env_var} (--{flag.name}): {error}") from None


def _flags_from_args(args: argparse.Namespace | None) -> dict[str, dict[str, Any]]:
    layer: dict[str, dict[str, Any]] = {}
    for flag in FLAGS:
        value = getattr(args, flag.dest, None) if args is not None else None
        if value is not None:
            layer.setdefault(flag.group, {})[flag.field] = value
    return layer


def _read_config_file(path: Path) -> dict[str, dict[str, Any]]:
    """Read a settings file: either grouped like RuntimeSettings, or flat flag names.

    A setting this release does not know is left out with one warning naming every such key,
    not refused: the file is the operator's ConfigMap, and during an upgrade (or after a
    rollback) a newer operator's settings reach this release's pods. Known settings are still
    validated strictly, and an unknown command-line flag is still an error (argparse)."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise SettingsError(f"cannot read config file {path}: {error}") from None
    if not isinstance(document, dict):
        raise SettingsError(
            f"config file {path} must hold a mapping, not {type(document).__name__}"
        )
    layer: dict[str, dict[str, Any]] = {}
    ignored: list[str] = []
    for key, value in document.items():
        flag = _BY_NAME.get(str(key).replace("_", "-"))
        if key in RuntimeSettings.model_fields and isinstance(value, dict):
            known = _group_fields(key)
            layer.setdefault(key, {}).update((f, v) for f, v in value.items() if f in known)
            ignored += [f"{key}.{f}" for f in value if f not in known]
        elif flag is not None:
            layer.setdefault(flag.group, {})[flag.field] = value
        elif key in RuntimeSettings.model_fields:
            raise SettingsError(f"config file {path}: {key!r} must be a mapping of settings")
        else:
            ignored.append(str(key))
    if ignored:
        _log.warning(
            "config file %s: ignoring settings this release does not know "
            "(written by a newer release?): %s",
            path,
            ", ".join(repr(name) for name in ignored),
        )
    return layer


def _group_fields(group: str) -> frozenset[str]:
    """The field names of one settings group (``server``, ``cache``, ...)."""
    model = RuntimeSettings.model_fields[group].annotation
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"settings group {group!r} is not a model")  # a bug, not bad input
    return frozenset(model.model_fields)


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"])
        flag = next((f for f in FLAGS if f"{location}.".startswith(f"{f.group}.{f.field}.")), None)
        where = f"--{flag.name} / {flag.env_var}" if flag else location
        problems.append(f"{where}: {item['msg']}")
    return "invalid settings: " + "; ".join(problems)
