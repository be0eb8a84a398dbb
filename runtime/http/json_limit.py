"""The bound on an infer request's JSON: ``--max-json-size`` bytes of JSON text.

orjson parses a request's JSON (the whole body, or the binary extension's header) holding the
GIL, so while it parses no other request is served on this process, the health checks
included: three gzip bodies inflating to 57 MiB of JSON each held ``/v2/health/live`` for
1.4-1.9 s. Numbers parse at about 8 ms per MiB here (``orjson.loads`` of a list of small
integers, 12 MiB in 100 ms), so the default 8 MiB bounds one parse to some 70 ms on this
hardware; a body over it is refused with 413 before it is parsed (from its declared length or
header length when they say so, else once it is whole and inflated). Binary tensor data does
not count: a large tensor travels as the binary extension's data, as tritonclient sends it.
"""

from __future__ import annotations

from cachefleet.runtime.errors import PayloadTooLargeError


def json_size(body_bytes: int, header_length: int | None) -> int:
    """The bytes of JSON text in a body of ``body_bytes`` (all of it without the binary
    extension, else its header)."""
    return body_bytes if header_length is None else min(header_length, body_bytes)


def check_json_size(size: int, limit: int) -> None:
    """PayloadTooLargeError when ``size`` bytes of JSON are over ``limit``."""
    if size > limit:
        raise PayloadTooLargeError(
            f"the request's JSON of {size} bytes is over the limit of {limit} bytes "
            "(--max-json-size; send large tensors as binary data)"
        )
