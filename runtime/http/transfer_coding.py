"""Transfer codings of requests: ``chunked`` alone, every other one refused with 501.

RFC 9112 (section 6.1): a server that receives a request whose transfer coding it does not
understand answers 501 (Not Implemented) and closes the connection. The HTTP parser under us
takes ``Transfer-Encoding: gzip, chunked`` for a chunked body and hands the application the
de-chunked bytes, still gzipped, with nothing to say they are: read as plain, they are
another body than the client (or a proxy in front, which may have framed the request
differently) meant, which is how request smuggling starts. So any ``Transfer-Encoding`` other
than exactly ``chunked`` (one header line or several, case and spaces aside) is refused here,
before any route, for every route alike; the answer closes the connection, since where this
request's body ends is not known to both sides. A body compressed for the application says
so in ``Content-Encoding``, which the infer route inflates.
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.exceptions import HTTPException

_NAME = b"transfer-encoding"


def transfer_coding_refusal(headers: Iterable[tuple[bytes, bytes]]) -> HTTPException | None:
    """The 501 for a request with these (lower-case named) headers, None when its transfer
    coding is absent or exactly ``chunked``."""
    codings: list[bytes] = []
    for name, value in headers:
        if name == _NAME:
            codings.extend(item.strip().lower() for item in value.split(b","))
    if not codings or codings == [b"chunked"]:
        return None
    named = b", ".join(codings).decode("latin-1")
    return HTTPException(
        501,
        f"Transfer-Encoding {named!r} is not implemented: send the body with Content-Length "
        "or 'Transfer-Encoding: chunked' alone (compress it with Content-Encoding)",
        headers={"Connection": "close"},
    )
