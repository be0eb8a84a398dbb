"""Which redirects a fetch follows: any that stays on ``https://``, none that leaves it.

A fetch that starts on https was asked for a verified, private channel; a ``Location`` pointing at
``http://`` (from a compromised or misconfigured server, or a proxy) would hand the model's bytes
to anyone on the path to replace. Clients follow such redirects by default (urllib and requests
both do), so each fetch path refuses them here: urllib through :class:`HttpsOnlyRedirects`,
requests (the GCS client) through :func:`refuse_downgrade` as a response hook.
"""

from __future__ import annotations

import urllib.request
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import urljoin, urlsplit


class DowngradeError(Exception):
    """A redirect from https to another scheme, refused."""


def refuse_downgrade(current: str, location: str) -> None:
    """DowngradeError when a redirect from ``current`` to ``location`` leaves https."""
    target = urlsplit(urljoin(current, location))
    if urlsplit(current).scheme == "https" and target.scheme != "https":
        where = f"{target.scheme}://{target.hostname or ''}"
        if target.port is not None:
            where += f":{target.port}"
        raise DowngradeError(
            f"refused a redirect from https to {where}: a download that starts on https "
            "continues only on https"
        )


class HttpsOnlyRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handling, refusing a redirect that leaves https."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        try:
            refuse_downgrade(req.full_url, newurl)
        except DowngradeError:
            fp.close()
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def refuse_downgrade_hook(response: Any, *args: Any, **kwargs: Any) -> Any:
    """A requests response hook: runs on every response, before requests follows a redirect."""
    if response.is_redirect:
        refuse_downgrade(response.url, response.headers["location"])
    return response
