"""Response compression, only when the client asks for it (tritonclient's
``response_compression_algorithm``). The binary extension's header length keeps counting the
uncompressed JSON header, as Triton does: clients decompress first, then split.

``Accept-Encoding`` is read as RFC 9110 (section 12.5.3) defines it: each coding with its
weight (``q``, 0 to 1, three decimals at most), ``q=0`` meaning "not acceptable", ``*`` standing
for every coding the header does not name, and ``identity`` acceptable unless it is excluded
(``identity;q=0``, or ``*;q=0`` without ``identity``); unnamed, it comes after every coding
the client named. The answer takes the coding of the highest weight among gzip, deflate and
identity; on a tie a compressed coding wins (the client
said it does not mind, and the bytes are fewer). When the client excludes every coding we have,
identity included, the answer still goes out uncompressed: RFC 9110 leaves the server that
choice, and an answer the client can read plainly serves it better than a 406. A list element
that is not of the RFC's form (a broken ``q``) is ignored, as if the client had not sent it.
"""

from __future__ import annotations

import functools
import re
import zlib

#: Fast levels: inference responses are compressed once and read once.
_LEVEL = 1

#: Our codings in the order a tie goes: compressed first.
_CODINGS = ("gzip", "deflate", "identity")

#: The weight of ``identity`` when the header names neither it nor ``*``: acceptable, but
#: after every coding the client named with any weight (0.001 is the least there is).
_IMPLICIT_IDENTITY = 0.0005

#: RFC 9110's ``weight``: ``q=`` and a qvalue (``0``, ``0.xxx``, ``1``, ``1.000``).
_WEIGHT = re.compile(r"q=(0(?:\.[0-9]{0,3})?|1(?:\.0{0,3})?)", re.IGNORECASE)
#: RFC 9110's ``token`` (tchar), for a coding's name.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def compress_for(accept_encoding: str | None, body: bytes) -> tuple[bytes, str | None]:
    """``body`` in the coding ``accept_encoding`` prefers (see the module), and the coding's
    name, None for identity."""
    if not accept_encoding:
        return body, None
    coding = preferred_coding(accept_encoding)
    if coding == "gzip":
        compressor = zlib.compressobj(_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        return compressor.compress(body) + compressor.flush(), "gzip"
    if coding == "deflate":
        return zlib.compress(body, _LEVEL), "deflate"
    return body, None


@functools.lru_cache(maxsize=64)
def preferred_coding(accept_encoding: str) -> str:
    """The coding of ours that ``accept_encoding`` weighs highest: gzip, deflate or identity
    (cached: clients send the same few headers on every request)."""
    weights = accepted_weights(accept_encoding)
    default = weights.get("*")
    best, best_weight = "identity", 0.0
    for coding in _CODINGS:
        weight = weights.get(coding, default)
        if weight is None:
            weight = _IMPLICIT_IDENTITY if coding == "identity" else 0.0
        if weight > best_weight:
            best, best_weight = coding, weight
    return best


def accepted_weights(accept_encoding: str) -> dict[str, float]:
    """Each coding ``accept_encoding`` names (lower case, ``*`` included) and its weight; a
    coding named twice keeps its first weight, an element not of the RFC's form is left out."""
    weights: dict[str, float] = {}
    for element in accept_encoding.split(","):
        coding, *parameters = (part.strip() for part in element.split(";"))
        if not coding:
            continue  # RFC 9110 lets lists carry empty elements
        if _TOKEN.fullmatch(coding) is None or len(parameters) > 1:
            continue
        weight = 1.0
        if parameters:
            match = _WEIGHT.fullmatch(parameters[0])
            if match is None:
                continue
            weight = float(match.group(1))
        weights.setdefault(coding.lower(), weight)
    return weights
