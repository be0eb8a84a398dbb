"""Settings handed to worker processes through the environment.

With ``--workers N`` uvicorn starts each worker from an import string, so the parent passes the
already-merged settings as JSON in one variable. The Redis password and the cache secret are
excluded from every settings dump; they travel in ``CACHEFLEET_REDIS_PASSWORD`` and
``CACHEFLEET_CACHE_SECRET``, which the loader already reads.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, MutableMapping

import orjson
from pydantic import SecretStr

from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.http.app import create_server
from cachefleet.runtime.http.front_door import InferFrontDoor

SETTINGS_VARIABLE = "CACHEFLEET_SETTINGS_JSON"
PASSWORD_VARIABLE = "CACHEFLEET_REDIS_PASSWORD"
SECRET_VARIABLE = "CACHEFLEET_CACHE_SECRET"


def export_settings(settings: RuntimeSettings, environ: MutableMapping[str, str]) -> None:
    """Put ``settings`` (and the secrets, separately) where workers will find them."""
    environ[SETTINGS_VARIABLE] = orjson.dumps(settings.to_document()).decode()
    if settings.redis.password is not None:
        environ[PASSWORD_VARIABLE] = settings.redis.password.get_secret_value()
    if settings.cache.secret is not None:
        environ[SECRET_VARIABLE] = settings.cache.secret.get_secret_value()


def settings_from_environment(environ: Mapping[str, str]) -> RuntimeSettings:
    settings = RuntimeSettings.model_validate_json(environ[SETTINGS_VARIABLE])
    password = environ.get(PASSWORD_VARIABLE)
    if password is not None:
        redis = settings.redis.model_copy(update={"password": SecretStr(password)})
        settings = settings.model_copy(update={"redis": redis})
    secret = environ.get(SECRET_VARIABLE)
    if secret is not None:
        cache = settings.cache.model_copy(update={"secret": SecretStr(secret)})
        settings = settings.model_copy(update={"cache": cache})
    return settings


def create_app_from_environment() -> InferFrontDoor:
    """uvicorn factory for worker processes (``--workers`` > 1)."""
    settings = settings_from_environment(os.environ)
    configure_logging(settings.server.log_level)
    return create_server(settings)


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s",
    )
