"""Restricted API groups, with Triton's flag syntax and group names.

``--http-restricted-api`` and ``--grpc-restricted-protocol`` each take
``<api>[,<api>...]:<header-key>=<header-value>`` and may be repeated; a group may be in one
restriction only. A request to a restricted group must carry the header (over gRPC the
metadata key ``triton-grpc-protocol-<header-key>``, as Triton and its clients name it) with
the value; the value is compared in constant time, as bytes, by one function every
transport calls (``Restriction.admits``). A value must be printable ASCII: HTTP header
values are ASCII in practice and gRPC metadata only ASCII, so a value past it could not be
presented alike everywhere, and is refused when the settings are read. When a request carries
the header more than once, its first value is the one judged, on every route. The groups are
Triton's, plus ``cache`` for the cache flush endpoint.

The values are secrets: they are kept as ``SecretStr`` and left out of every settings dump.
Several restrictions in one environment variable are separated by newlines (a header value
cannot hold one), since Triton's syntax already uses commas.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Iterable
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, SecretStr, field_validator

ApiGroup = Literal[
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
    "cache",
]
API_GROUPS: tuple[str, ...] = get_args(ApiGroup)
#: What Triton puts before the header key to make the gRPC metadata key.
GRPC_PREFIX = "triton-grpc-protocol-"


class Restriction(BaseModel):
    """Groups that need ``header: value`` on each request."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: tuple[ApiGroup, ...]
    header: str
    value: SecretStr

    @field_validator("header")
    @classmethod
    def _header_token(cls, header: str) -> str:
        if not header or any(c in header for c in " \t\r\n:=,") or not header.isascii():
            raise ValueError("the header key must be one word of ASCII (no spaces, ':' or '=')")
        return header

    @field_validator("value")
    @classmethod
    def _header_value(cls, value: SecretStr) -> SecretStr:
        """Printable ASCII, without spaces at its ends: what an HTTP header value and a gRPC
        metadata value can carry unchanged (HTTP trims the spaces; gRPC metadata is ASCII
        only; a byte past ASCII would be compared as whatever each library decoded it to)."""
        text = value.get_secret_value()
        if not text or text != text.strip() or any(not " " <= c <= "~" for c in text):
            raise ValueError(
                "the header value must be non-empty printable ASCII, without spaces at its ends"
            )
        return value

    @property
    def grpc_key(self) -> str:
        """The gRPC metadata key, lower case as gRPC sends it."""
        return (GRPC_PREFIX + self.header).lower()

    @functools.cached_property
    def _expected_digest(self) -> bytes:
        """The value's bytes (ASCII, see ``_header_value``), digested once."""
        return hashlib.sha256(self.value.get_secret_value().encode("ascii")).digest()

    def admits(self, presented: str | bytes | None) -> bool:
        """Whether ``presented`` is the value: the one comparison of every transport, bytes
        to bytes, in constant time (over digests, so that not even the value's length shows
        in the time taken). HTTP passes the header's raw bytes; a ``str`` (gRPC metadata) is
        taken back to its bytes as HTTP libraries decode them (latin-1, one byte a
        character): a character past that is no header byte, so never the value."""
        if presented is None:
            return False
        if isinstance(presented, str):
            try:
                presented = presented.encode("latin-1")
            except UnicodeEncodeError:
                return False
        return hmac.compare_digest(hashlib.sha256(presented).digest(), self._expected_digest)

    def to_flag(self) -> str:
        """Back to Triton's syntax (with the secret value): how workers are handed it."""
        return f"{','.join(self.groups)}:{self.header}={self.value.get_secret_value()}"


def parse_restriction(text: str) -> Restriction:
    """``<api>[,<api>...]:<header-key>=<header-value>``, as Triton reads it. The value is
    never quoted in an error."""
    apis, colon, rest = text.partition(":")
    header, equals, value = rest.partition("=")
    if not colon or not equals:
        raise ValueError("a restriction is written <api>[,<api>...]:<header-key>=<header-value>")
    groups = tuple(api.strip() for api in apis.split(",") if api.strip())
    unknown = [group for group in groups if group not in API_GROUPS]
    if unknown or not groups:
        raise ValueError(
            f"unknown restricted api {unknown[0] if unknown else ''!r}; known: "
            + ", ".join(API_GROUPS)
        )
    return Restriction.model_validate(
        {"groups": groups, "header": header.strip(), "value": SecretStr(value)}
    )


def _restrictions(value: Any) -> Any:
    """Restrictions from a flag list, a newline-separated string (environment) or a list of
    strings or mappings (config file); each group in one restriction only."""
    if isinstance(value, str):
        value = [line for line in value.splitlines() if line.strip()]
    if not isinstance(value, Iterable) or isinstance(value, bytes | dict):
        return value
    parsed = [parse_restriction(item) if isinstance(item, str) else item for item in value]
    seen: set[str] = set()
    for item in parsed:
        groups = item.groups if isinstance(item, Restriction) else ()
        for group in groups:
            if group in seen:
                raise ValueError(f"restricted api {group!r} can not be in several restrictions")
            seen.add(group)
    return tuple(parsed)


Restrictions = Annotated[tuple[Restriction, ...], BeforeValidator(_restrictions)]


def by_group(restrictions: Iterable[Restriction]) -> dict[str, Restriction]:
    """Each restricted group's restriction."""
    return {group: item for item in restrictions for group in item.groups}
