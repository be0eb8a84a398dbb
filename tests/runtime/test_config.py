"""The settings loader: flags over environment over file over defaults."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import pytest

from cachefleet.runtime.config import (
    QuantityError,
    SettingsError,
    add_flags,
    load_settings,
    parse_bytes,
    parse_duration_s,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(argv)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("256Mi", 256 * 2**20), ("1G", 10**9), ("1048576", 2**20), ("1.5Ki", 1536), ("10B", 10)],
)
def test_sizes_read_kubernetes_quantities(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("3600", 3600.0), ("1h30m", 5400.0), ("250ms", 0.25)]
)
def test_durations_read_seconds_or_go_durations(text: str, expected: float) -> None:
    assert parse_duration_s(text) == expected


@pytest.mark.parametrize("text", ["", "12XB", "-1", "1h-3m", "abc"])
def test_bad_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_bytes(text) if "h" not in text else parse_duration_s(text)


def test_flags_beat_environment_beat_file(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("port: 7000\ncache:\n  mode: redis\n  ttl_s: 10m\nredis-url: redis://a:1\n")
    settings = load_settings(
        parse("--config", str(config), "--port", "9000"),
        {
            "CACHEFLEET_PORT": "8000",
            "CACHEFLEET_CACHE": "tiered",
            "CACHEFLEET_REDIS_PASSWORD": "pw",
        },
    )
    assert settings.server.port == 9000
    assert settings.cache.mode == "tiered"
    assert settings.cache.ttl_s == 600
    assert settings.redis.url == "redis://a:1"
    assert settings.redis.password is not None
    assert settings.redis.password.get_secret_value() == "pw"


def test_row_cache_models_from_a_flag_the_environment_or_a_list_in_the_file(tmp_path: Path) -> None:
    assert load_settings(parse("--row-cache-models", "a, b"), {}).models.row_cache_models == (
        "a",
        "b",
    )
    environment = {"CACHEFLEET_ROW_CACHE_MODELS": "densenet_batch"}
    assert load_settings(parse(), environment).models.row_cache_models == ("densenet_batch",)
    config = tmp_path / "settings.yaml"
    config.write_text("models:\n  row_cache_models: [x, y]\n")
    assert load_settings(parse("--config", str(config)), {}).models.row_cache_models == ("x", "y")
    assert load_settings(parse(), {}).models.row_cache_models == ()


def test_password_never_appears_in_the_rendered_document() -> None:
    settings = load_settings(
        parse("--redis-password", "s3cret", "--redis-url", "redis://r:6379"), {}
    )
    assert "s3cret" not in repr(settings.to_document())


def test_errors_name_the_flag_and_environment_variable() -> None:
    with pytest.raises(SettingsError, match="--local-cache-size / CACHEFLEET_LOCAL_CACHE_SIZE"):
        load_settings(parse("--local-cache-size", "lots"), {})
    with pytest.raises(SettingsError, match="redis url"):
        load_settings(parse("--redis-url", "http://x"), {})


def test_settings_a_newer_release_writes_are_ignored_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A newer operator's ConfigMap reaches this release's pods during an upgrade or after a
    rollback: what this release does not know is named once and left out, the rest applies."""
    config = tmp_path / "settings.yaml"
    config.write_text(
        "prot: 1\n"
        "quotas: {max: 3}\n"
        "cache: {mode: local, namespace_v9: x, local_size_bytes: 1Mi}\n"
        "port: 9000\n"
    )
    with caplog.at_level(logging.WARNING, logger="cachefleet.runtime.config"):
        settings = load_settings(parse("--config", str(config)), {})
    assert (settings.cache.mode, settings.cache.local_size_bytes) == ("local", 2**20)
    assert settings.server.port == 9000
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "'prot', 'quotas', 'cache.namespace_v9'" in warning.getMessage()


def test_known_settings_stay_strict_and_unknown_flags_fail(tmp_path: Path) -> None:
    config = tmp_path / "settings.yaml"
    config.write_text("cache: {mode: everywhere}\nunknown: 1\n")
    with pytest.raises(SettingsError, match=r"--cache .*Input should be"):
        load_settings(parse("--config", str(config)), {})
    config.write_text("server: 8000\n")
    with pytest.raises(SettingsError, match="server"):
        load_settings(parse("--config", str(config)), {})
    with pytest.raises(SystemExit):
        parse("--prot", "1")


def test_every_variable_of_one_group_is_read() -> None:
    settings = load_settings(
        parse(),
        {
            "CACHEFLEET_REDIS_URL": "redis://seed:7000",
            "CACHEFLEET_REDIS_MODE": "cluster",
            "CACHEFLEET_REDIS_SOCKET_TIMEOUT": "0.25",
            "CACHEFLEET_REDIS_PASSWORD": "pw",
        },
    )
    assert settings.redis.url == "redis://seed:7000"
    assert settings.redis.mode == "cluster"
    assert settings.redis.socket_timeout_s == 0.25
    assert settings.redis.password is not None


def test_redis_mode_flags() -> None:
    settings = load_settings(
        parse("--redis-mode", "sentinel", "--redis-sentinel-master", "main",
              "--redis-url", "redis://sentinel:26379"),
        {},
    )  # fmt: skip
    assert (settings.redis.mode, settings.redis.sentinel_master) == ("sentinel", "main")
    assert settings.to_document()["redis"]["mode"] == "sentinel"
    with pytest.raises(SystemExit):
        parse("--redis-mode", "replicated")


def test_model_control_flags_repeat_and_read_comma_lists(tmp_path: Path) -> None:
    args = parse("--model-control-mode", "explicit", "--load-model", "a", "--load-model", "b")
    settings = load_settings(args, environ={})
    assert (settings.models.control_mode, settings.models.load_models) == ("explicit", ("a", "b"))
    from_env = load_settings(parse(), environ={"CACHEFLEET_LOAD_MODEL": "simple, densenet_onnx"})
    assert from_env.models.load_models == ("simple", "densenet_onnx")
    config = tmp_path / "serve.yaml"
    config.write_text("model-control-mode: explicit\nload-model: ['*']\n")
    from_file = load_settings(parse("--config", str(config)), environ={})
    assert (from_file.models.control_mode, from_file.models.load_models) == ("explicit", ("*",))
    with pytest.raises(SystemExit):
        parse("--model-control-mode", "poll")


def test_upstream_flags_keep_the_auth_value_out_of_every_dump_and_refuse_what_cannot_work(
    tmp_path: Path,
) -> None:
    secret = "upstream-s3cret-value"
    settings = load_settings(
        parse("--upstream", "grpcs://triton:8001", "--upstream-auth-header", "Authorization",
              "--upstream-timeout", "10s", "--upstream-tls-ca-file", str(tmp_path / "ca.crt")),
        {"CACHEFLEET_UPSTREAM_AUTH_VALUE": secret},
    )  # fmt: skip
    upstream = settings.upstream
    assert (upstream.url, upstream.auth_header, upstream.timeout_s) == (
        "grpcs://triton:8001", "authorization", 10.0,
    )  # fmt: skip
    assert upstream.auth_value is not None
    assert upstream.auth_value.get_secret_value() == secret
    assert secret not in repr(settings.to_document()) + repr(settings)
    refused = {
        ("--upstream", "unix:///triton.sock"): "must start with grpc://, grpcs://",
        ("--upstream", "grpc://user:pw@triton:8001"): "use --upstream-auth-file",
        ("--upstream", "grpc://t:8001", "--upstream-auth-file", "f"): "goes with",
        (
            "--upstream",
            "grpc://t:8001",
            "--upstream-tls-ca-file",
            "ca",
        ): "need a grpcs:// or https://",
    }
    for argv, message in refused.items():
        with pytest.raises(SettingsError, match=message) as raised:
            load_settings(parse(*argv), {})
        assert "pw@" not in str(raised.value)
