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
from cachefleet.runtime.config.settings import (
    DEFAULT_NAMESPACE,
    NAMESPACE_PATTERN,
    CacheMode,
    CacheSettings,
    ModelSettings,
    RedisMode,
    RedisSettings,
    RuntimeSettings,
    ServerSettings,
)

__all__ = [
    "DEFAULT_NAMESPACE",
    "FLAGS",
    "NAMESPACE_PATTERN",
    "CacheMode",
    "CacheSettings",
    "Flag",
    "ModelSettings",
    "QuantityError",
    "RedisMode",
    "RedisSettings",
    "RuntimeSettings",
    "ServerSettings",
    "SettingsError",
    "add_flags",
    "format_bytes",
    "load_settings",
    "parse_bytes",
    "parse_duration_s",
]
