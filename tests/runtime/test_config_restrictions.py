"""Triton's restriction syntax, its group names, and a value that never shows."""

from __future__ import annotations

import argparse

import pytest

from cachefleet.runtime.config import (
    API_GROUPS,
    SettingsError,
    add_flags,
    load_settings,
    parse_restriction,
)

VALUE = "v-5e1f-secret"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser)
    return parser.parse_args(argv)


def test_triton_groups_plus_cache() -> None:
    assert set(API_GROUPS) == {
        "health", "metadata", "inference", "shared-memory", "model-config",
        "model-repository", "statistics", "trace", "logging", "cache",
    }  # fmt: skip


def test_the_syntax_and_a_value_holding_separators() -> None:
    restriction = parse_restriction("model-repository,cache:admin-key=a:b=c,d")
    assert restriction.groups == ("model-repository", "cache")
    assert restriction.header == "admin-key"
    assert restriction.value.get_secret_value() == "a:b=c,d"
    assert restriction.grpc_key == "triton-grpc-protocol-admin-key"
    assert restriction.to_flag() == "model-repository,cache:admin-key=a:b=c,d"


@pytest.mark.parametrize("presented", [None, "", "a:b=c", "a:b=c,dd", "A:B=C,D", b"a:b=c,"])
def test_only_the_exact_value_is_admitted(presented: str | bytes | None) -> None:
    restriction = parse_restriction("cache:k=a:b=c,d")
    assert not restriction.admits(presented)
    assert restriction.admits("a:b=c,d")
    assert restriction.admits(b"a:b=c,d")


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (("--http-restricted-api", f"nope:k={VALUE}"), {}, "unknown restricted api 'nope'"),
        (("--http-restricted-api", f"cache{VALUE}"), {}, "<api>[,<api>...]:<header-key>="),
        (("--http-restricted-api", "cache:k="), {}, "non-empty"),
        (("--http-restricted-api", f"cache:=x{VALUE}"), {}, "header key"),
        (
            ("--grpc-restricted-protocol", f"cache:k={VALUE}"),
            {"CACHEFLEET_GRPC_RESTRICTED_PROTOCOL": "x"},  # the flag wins over the environment
            None,
        ),
        (
            (),
            {"CACHEFLEET_HTTP_RESTRICTED_API": f"cache:k={VALUE}\ninference,cache:j={VALUE}"},
            "'cache' can not be in several restrictions",
        ),
    ],
)
def test_bad_restrictions_are_refused_without_their_value(
    argv: tuple[str, ...], environ: dict[str, str], expected: str | None
) -> None:
    if expected is None:
        load_settings(parse(*argv), environ)
        return
    with pytest.raises(SettingsError) as refused:
        load_settings(parse(*argv), environ)
    assert expected in str(refused.value)
    assert VALUE not in str(refused.value)


def test_restrictions_never_reach_a_settings_dump() -> None:
    settings = load_settings(
        parse("--http-restricted-api", f"cache:k={VALUE}", "--grpc-restricted-protocol",
              f"model-repository:k={VALUE}"),
        {},
    )  # fmt: skip
    assert len(settings.security.http_restricted_api) == 1
    assert VALUE not in str(settings.to_document())
    assert VALUE not in repr(settings)
