"""HTTP calls from a test to a server it started, without httpx's per-call TLS set-up.

Each top-level ``httpx.get``/``httpx.post`` builds a client, and each client builds an SSL
context by reading the whole CA bundle, even for a plain ``http://`` URL: 20 ms on a quiet
core, over 100 ms on two busy ones, many times what a request to a loopback server costs. These
calls take the same arguments but share one context, so each still opens its own connection
(what a test of connection handling needs) and only the bundle is read once. Tests of TLS pass
their own ``verify`` context to httpx directly.
"""

from __future__ import annotations

import functools
import ssl
from typing import Any

import httpx


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(method, url, verify=_tls_context(), **kwargs)  # noqa: TID251 (shared)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)
