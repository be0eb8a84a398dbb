"""Response compression, only when the client asks for it (tritonclient's
``response_compression_algorithm``). The binary extension's header length keeps counting the
uncompressed JSON header, as Triton does: clients decompress first, then split."""

from __future__ import annotations

import zlib

#: Fast levels: inference responses are compressed once and read once.
_LEVEL = 1


def compress_for(accept_encoding: str | None, body: bytes) -> tuple[bytes, str | None]:
    """``body`` compressed with the first of gzip/deflate the client accepts, and its name."""
    if not accept_encoding:
        return body, None
    accepted = {item.split(";", 1)[0].strip().lower() for item in accept_encoding.split(",")}
    if "gzip" in accepted:
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        return compressor.compress(body) + compressor.flush(), "gzip"
    if "deflate" in accepted:
        return zlib.compress(body, _LEVEL), "deflate"
    return body, None
