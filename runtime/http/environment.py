"""Settings handed to worker processes through the environment.

With ``--workers N`` uvicorn starts each worker from an import string, so the parent passes the
already-merged settings as JSON in one variable. The Redis password and the cache secret are
excluded from every settings dump; they travel in ``CACHEFLEET_REDIS_PASSWORD`` and
``CACHEFLEET_CACHE_SECRET``, which the loader already reads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping

import orjson
from pydantic import SecretStr

from cachefleet.runtime.config import RedactingFilter, RuntimeSettings

SETTINGS_VARIABLE = "CACHEFLEET_SETTINGS_JSON"
PASSWORD_VARIABLE = "CACHEFLEET_REDIS_PASSWORD"
SECRET_VARIABLE = "CACHEFLEET_CACHE_SECRET"
URL_VARIABLE = "CACHEFLEET_REDIS_URL"
#: The upstream's auth header value, when given inline rather than as a file.
UPSTREAM_AUTH_VARIABLE = "CACHEFLEET_UPSTREAM_AUTH_VALUE"
#: The restrictions (secret values, so left out of the JSON), one per line in each variable.
RESTRICTION_VARIABLES = {
    "http_restricted_api": "CACHEFLEET_HTTP_RESTRICTED_API",
    "grpc_restricted_protocol": "CACHEFLEET_GRPC_RESTRICTED_PROTOCOL",
}


def export_settings(settings: RuntimeSettings, environ: MutableMapping[str, str]) -> None:
    """Put ``settings`` (and the secrets, separately) where workers will find them.

    The settings' URL no longer holds a password (the settings moved it out); the URL variable
    the parent may have read is replaced by that clean URL, so no worker inherits the secret
    in it.
    """
    environ[SETTINGS_VARIABLE] = orjson.dumps(settings.to_document()).decode()
    if settings.redis.password is not None:
        environ[PASSWORD_VARIABLE] = settings.redis.password.get_secret_value()
    if settings.cache.secret is not None:
        environ[SECRET_VARIABLE] = settings.cache.secret.get_secret_value()
    if settings.upstream.auth_value is not None:
        environ[UPSTREAM_AUTH_VARIABLE] = settings.upstream.auth_value.get_secret_value()
    if URL_VARIABLE in environ and settings.redis.url is not None:
        environ[URL_VARIABLE] = settings.redis.url
    for field, variable in RESTRICTION_VARIABLES.items():
        restrictions = getattr(settings.security, field)
        if restrictions:
            environ[variable] = "\n".join(item.to_flag() for item in restrictions)
        else:
            environ.pop(variable, None)


def settings_from_environment(environ: Mapping[str, str]) -> RuntimeSettings:
    document = orjson.loads(environ[SETTINGS_VARIABLE])
    password = environ.get(PASSWORD_VARIABLE)
    if password is not None:
        document.setdefault("redis", {})["password"] = SecretStr(password)
    secret = environ.get(SECRET_VARIABLE)
    if secret is not None:
        document.setdefault("cache", {})["secret"] = SecretStr(secret)
    auth = environ.get(UPSTREAM_AUTH_VARIABLE)
    if auth is not None and document.get("upstream", {}).get("auth_header") is not None:
        document["upstream"]["auth_value"] = SecretStr(auth)
    for field, variable in RESTRICTION_VARIABLES.items():
        if variable in environ:
            document.setdefault("security", {})[field] = environ[variable]
    return RuntimeSettings.model_validate(document)


def configure_logging(level: str) -> None:
    """Log to stderr; every record (ours and the libraries') passes the URL redaction."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
    )
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
