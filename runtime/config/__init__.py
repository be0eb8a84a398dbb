"""The runtime's configuration model: the only part of the runtime the operator imports.

Pure data and parsing; no I/O beyond reading a settings file when asked.
"""

from cachefleet.runtime.config.flags import FLAGS, Flag, SettingsError, add_flags, load_settings
from cachefleet.runtime.config.quantity import (
    QuantityError,
    format_bytes,
    parse_bytes,
    parse_duration_s,
)
from cachefleet.runtime.config.redaction import RedactingFilter, redact, split_password
from cachefleet.runtime.config.restrictions import (
    API_GROUPS,
    ApiGroup,
    Restriction,
    by_group,
    parse_restriction,
)
from cachefleet.runtime.config.settings import (
    DEFAULT_NAMESPACE,
    NAMESPACE_PATTERN,
    CacheMode,
    CacheSettings,
    LimitSettings,
    ModelSettings,
    RedisMode,
    RedisSettings,
    RuntimeSettings,
    SecuritySettings,
    ServerSettings,
    UpstreamSettings,
)
from cachefleet.runtime.config.storage_uri import (
    StorageUri,
    StorageUriError,
    parse_storage_uri,
)

__all__ = [
    "API_GROUPS",
    "DEFAULT_NAMESPACE",
    "FLAGS",
    "NAMESPACE_PATTERN",
    "ApiGroup",
    "CacheMode",
    "CacheSettings",
    "Flag",
    "LimitSettings",
    "ModelSettings",
    "QuantityError",
    "RedactingFilter",
    "RedisMode",
    "RedisSettings",
    "Restriction",
    "RuntimeSettings",
    "SecuritySettings",
    "ServerSettings",
    "SettingsError",
    "StorageUri",
    "StorageUriError",
    "UpstreamSettings",
    "add_flags",
    "by_group",
    "format_bytes",
    "load_settings",
    "parse_bytes",
    "parse_duration_s",
    "parse_restriction",
    "parse_storage_uri",
    "redact",
    "split_password",
]
