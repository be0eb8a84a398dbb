"""`cachefleet flush`: remove one model's entries from the response cache.

Straight from Redis (``--redis-url``, or ``CACHEFLEET_REDIS_URL`` and the other Redis flags
of ``cachefleet serve``): the model's keys are SCANned and UNLINKed, and a flush message on
the invalidation channel makes every running server drop its in-process copies. And/or through
servers (``--server``, repeatable), which flush both tiers themselves. A server that restricts
the ``cache`` API (``--http-restricted-api``) gets its header: from the same flag, variable or
config file the server reads, or from ``--header KEY:VALUE``.

A server's answer counts only when it is that server's own 2xx: a redirect is never followed
(following one would send the admin header to whatever host the ``Location`` names, and report
its answer as the flush's), so a 3xx, like any other non-2xx, is a failure with exit status 1.
"""

from __future__ import annotations

import argparse
import ssl
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cachefleet.runtime.cache.key import KeySpace
    from cachefleet.runtime.config import RedisSettings, Restriction

HELP = "remove one model's entries from the response cache."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from cachefleet.runtime.config.flags import FLAGS

    parser.add_argument("--model", required=True, help="model whose entries are removed")
    parser.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="URL",
        help="also POST /v2/models/MODEL/cache/flush to this server, e.g. http://host:8000",
    )
    parser.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="send this header to the servers (repeatable), e.g. a restricted API's key",
    )
    parser.add_argument(
        "--cacert",
        metavar="FILE",
        help="CA certificate(s) to trust for https:// servers (default: the system's)",
    )
    parser.add_argument("--config", help="YAML settings file, as for cachefleet serve")
    for flag in FLAGS:
        if flag.group == "redis" or flag.name == "cache-namespace":
            parser.add_argument(f"--{flag.name}", help=f"{flag.help} [env {flag.env_var}]")
    parser.add_argument(
        "--http-restricted-api",
        action="append",
        metavar="RESTRICTION",
        help="the servers' restrictions, as for cachefleet serve: the one that covers the "
        "cache API gives the header to send [env CACHEFLEET_HTTP_RESTRICTED_API]",
    )


def run(args: argparse.Namespace) -> int:
    from cachefleet.runtime.cache.key import KeySpace
    from cachefleet.runtime.config import SettingsError, load_settings

    try:
        settings = load_settings(args)
    except SettingsError as error:
        print(f"cachefleet flush: {error}", file=sys.stderr)
        return 2
    if settings.redis.url is None and not args.server:
        print("cachefleet flush: give --redis-url and/or --server", file=sys.stderr)
        return 2
    try:
        headers = _headers(args.header, settings.security.http_restricted_api)
    except ValueError as error:
        print(f"cachefleet flush: {error}", file=sys.stderr)
        return 2
    status = 0
    context = ssl.create_default_context(cafile=args.cacert) if args.cacert else None
    for server in args.server:
        status |= _flush_server(server, args.model, headers, context)
    if settings.redis.url is not None:
        status |= _flush_redis(settings.redis, KeySpace(settings.cache.namespace), args.model)
    return status


def _headers(given: list[str], restrictions: tuple[Restriction, ...]) -> dict[str, str]:
    """The headers to send: the restriction of the ``cache`` API's, then ``--header``'s."""
    headers = {}
    for restriction in restrictions:
        if "cache" in restriction.groups:
            headers[restriction.header] = restriction.value.get_secret_value()
    for item in given:
        key, colon, value = item.partition(":")
        if not colon or not key.strip():
            raise ValueError("--header takes KEY:VALUE")
        headers[key.strip()] = value.strip()
    return headers


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A 3xx stays an answer (an HTTPError), never a second request elsewhere."""

    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def _flush_server(
    server: str, model: str, headers: dict[str, str], context: ssl.SSLContext | None
) -> int:
    base = server if "://" in server else f"http://{server}"
    url = f"{base.rstrip('/')}/v2/models/{urllib.parse.quote(model, safe='')}/cache/flush"
    request = urllib.request.Request(url, method="POST", headers=headers)
    opener = urllib.request.build_opener(
        urllib.request.HTTPSHandler(context=context), _NoRedirects()
    )
    try:
        with opener.open(request, timeout=30) as r:
            print(f"{base}: {r.read().decode(errors='replace')}")
    except urllib.error.HTTPError as error:
        if 300 <= error.code < 400:
            where = error.headers.get("Location", "nowhere")
            detail = f"redirected to {where}: not followed, give the server's own address"
        else:
            detail = error.read().decode(errors="replace")
        print(f"cachefleet flush: {base}: HTTP {error.code} {detail}", file=sys.stderr)
        return 1
    except OSError as error:
        print(f"cachefleet flush: {base}: {error}", file=sys.stderr)
        return 1
    return 0


def _flush_redis(settings: RedisSettings, keys: KeySpace, model: str) -> int:
    import asyncio

    from cachefleet.runtime.cache.errors import CacheTierError
    from cachefleet.runtime.cache.redis_tier import RedisTier

    # An admin command may wait longer than a request would.
    tier = RedisTier(settings.model_copy(update={"socket_timeout_s": 10.0, "pool_size": 2}))

    async def flush() -> int:
        await tier.start()
        try:
            removed = await tier.flush_model(model, keys)
            await tier.publish(keys.flush_channel, model)
            return removed
        finally:
            await tier.close()

    try:
        removed = asyncio.run(flush())
    except CacheTierError as error:
        print(f"cachefleet flush: {error!s}", file=sys.stderr)
        return 1
    print(
        f"{tier.where}: removed {removed} entries of model {model!r} in namespace "
        f"{keys.namespace!r}; servers notified"
    )
    return 0
