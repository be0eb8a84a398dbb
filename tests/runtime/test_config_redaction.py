"""One redaction for every Redis URL form, and a password moved out of the URL at once."""

from __future__ import annotations

import argparse
import io
import logging

import pytest

from cachefleet.runtime.config import (
    RedactingFilter,
    RuntimeSettings,
    SettingsError,
    add_flags,
    load_settings,
    redact,
    split_password,
)
from cachefleet.runtime.errors import NotReadyError

SECRET = "pw-0c9d-SECRET"
#: Every form a password may take in a Redis URL, with the URL that must remain.
FORMS = [
    (f"redis://:{SECRET}@cache:6379/0", "redis://cache:6379/0"),
    (f"redis://app:{SECRET}@cache:6379/0", "redis://app@cache:6379/0"),
    (f"rediss://cache:6380/1?password={SECRET}", "rediss://cache:6380/1"),
    (f"redis://cache:6379/0?db=2&password={SECRET}", "redis://cache:6379/0?db=2"),
    (f"unix://:{SECRET}@/run/redis.sock?db=0", "unix:///run/redis.sock?db=0"),
    (f"unix:///run/redis.sock?password={SECRET}", "unix:///run/redis.sock"),
    (f"redis://:{SECRET}@[::1]:7000", "redis://[::1]:7000"),
]
SEEDS = [  # the same forms name a Cluster seed node or a Sentinel
    ("cluster", None, f"redis://:{SECRET}@seed-0:7000"),
    ("sentinel", "mymaster", f"redis://sentinel:26379?password={SECRET}"),
]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(("url", "clean"), FORMS)
def test_every_url_form_gives_up_its_password(url: str, clean: str) -> None:
    assert split_password(url) == (clean, SECRET)
    assert SECRET not in redact(f"cannot reach {url}: refused")
    assert redact(clean) == clean


def test_a_percent_encoded_password_is_decoded_as_redis_py_does() -> None:
    assert split_password("redis://:p%40ss%3Aw@h:1/0") == ("redis://h:1/0", "p@ss:w")


def test_a_password_holding_at_signs_and_colons_is_taken_whole() -> None:
    url = "redis://app:p@ss:w@rd@cache:6379/0"
    assert split_password(url) == ("redis://app@cache:6379/0", "p@ss:w@rd")
    assert redact(f"at {url} and redis://:x@y@h/0") == (
        "at redis://app:***@cache:6379/0 and redis://:***@h/0"
    )


@pytest.mark.parametrize(("url", "clean"), FORMS)
def test_the_settings_move_the_password_out_of_the_url(url: str, clean: str) -> None:
    settings = load_settings(parse("--redis-url", url), {})
    assert settings.redis.url == clean
    assert settings.redis.password is not None
    assert settings.redis.password.get_secret_value() == SECRET
    assert SECRET not in str(settings.to_document())
    assert SECRET not in repr(settings)


@pytest.mark.parametrize(("mode", "master", "url"), SEEDS)
def test_seed_urls_of_cluster_and_sentinel_too(mode: str, master: str | None, url: str) -> None:
    environ = {"CACHEFLEET_REDIS_URL": url, "CACHEFLEET_REDIS_MODE": mode}
    if master:
        environ["CACHEFLEET_REDIS_SENTINEL_MASTER"] = master
    settings = load_settings(parse(), environ)
    assert settings.redis.password is not None
    assert SECRET not in str(settings.to_document())


def test_the_same_password_twice_is_fine_two_different_ones_are_refused_unechoed() -> None:
    url = f"redis://:{SECRET}@cache:6379/0"
    same = load_settings(parse("--redis-url", url), {"CACHEFLEET_REDIS_PASSWORD": SECRET})
    assert same.redis.url == "redis://cache:6379/0"
    with pytest.raises(SettingsError) as refused:
        load_settings(parse("--redis-url", url), {"CACHEFLEET_REDIS_PASSWORD": "other-pw"})
    assert SECRET not in str(refused.value)
    assert "other-pw" not in str(refused.value)


def test_a_bad_url_is_refused_without_its_password() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(parse("--redis-url", f"http://u:{SECRET}@h:1/?password={SECRET}"), {})
    assert SECRET not in str(refused.value)


def test_workers_inherit_neither_settings_nor_a_url_with_the_password() -> None:
    from cachefleet.runtime.http.environment import export_settings, settings_from_environment

    url = f"redis://cache:6379/0?password={SECRET}"
    environ = {"CACHEFLEET_REDIS_URL": url}
    settings = load_settings(parse("--cache", "redis"), environ)
    export_settings(settings, environ)
    assert SECRET not in environ["CACHEFLEET_SETTINGS_JSON"]
    assert environ["CACHEFLEET_REDIS_URL"] == "redis://cache:6379/0"
    assert environ["CACHEFLEET_REDIS_PASSWORD"] == SECRET
    restored = settings_from_environment(environ)
    assert restored.redis.password is not None
    assert restored.redis.password.get_secret_value() == SECRET
    assert isinstance(restored, RuntimeSettings)


def test_workers_get_the_upstream_auth_value_beside_the_settings_not_in_them() -> None:
    from cachefleet.runtime.http.environment import export_settings, settings_from_environment

    environ: dict[str, str] = {}
    argv = ("--upstream", "grpc://triton:8001", "--upstream-auth-header", "authorization")
    settings = load_settings(parse(*argv, "--upstream-auth-value", SECRET), environ)
    export_settings(settings, environ)
    assert SECRET not in environ["CACHEFLEET_SETTINGS_JSON"]
    restored = settings_from_environment(environ).upstream
    assert restored.auth_value is not None
    assert restored.auth_value.get_secret_value() == SECRET


def test_error_messages_and_log_records_are_redacted() -> None:
    url = f"redis://app:{SECRET}@cache:6379/0?password={SECRET}"
    assert SECRET not in NotReadyError(f"redis GET k at {url}: timeout").message
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("test-redaction")
    logger.addHandler(handler)
    try:
        logger.warning("connecting to %s", url)
        try:
            raise ConnectionError(f"refused by {url}")
        except ConnectionError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue()
    assert "connecting to redis://app:***@cache" in written
    assert "refused by" in written
    assert SECRET not in written
