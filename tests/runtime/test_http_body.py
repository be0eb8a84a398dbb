"""Inflating a compressed body: in bounded steps, each paid for first, refused past the limit,
for gzip and deflate alike; a plain body is joined as it came."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import zlib
from collections.abc import Callable

import pytest

from cachefleet.runtime.errors import BadRequestError, PayloadTooLargeError
from cachefleet.runtime.http.body import INLINE_BYTES, STEP_BYTES, inflate, joined

LIMIT = 8 << 20
ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": lambda data: gzip.compress(data),
    "deflate": lambda data: zlib.compress(data),
}


class Recorder:
    """A charge that records what it was asked to cover."""

    covered = 0

    def __init__(self) -> None:
        self.inflated: list[int] = []

    async def cover(self, size: int) -> None:
        self.covered = size

    async def cover_inflated(self, size: int) -> None:
        self.inflated.append(size)


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_compressed_body_is_inflated_and_paid_for_step_by_step(encoding: str) -> None:
    plain = bytes(range(256)) * (12 * 1024)  # 3 MiB
    charge = Recorder()
    body = asyncio.run(inflate([ENCODERS[encoding](plain)], encoding, LIMIT, charge))
    assert body == plain
    assert charge.inflated[0] == INLINE_BYTES
    steps = [b - a for a, b in itertools.pairwise(charge.inflated)]
    assert all(step <= STEP_BYTES for step in steps)
    assert charge.inflated[-1] >= len(plain)


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_bomb_is_refused_having_paid_for_no_more_than_the_limit(encoding: str) -> None:
    bomb = ENCODERS[encoding](b"0" * (4 * LIMIT))  # 32 MiB from about 32 KiB
    charge = Recorder()
    with pytest.raises(PayloadTooLargeError, match="max-request-size"):
        asyncio.run(inflate([bomb[:100], bomb[100:]], encoding, LIMIT, charge))
    assert max(charge.inflated) == LIMIT + 1


def test_a_truncated_or_broken_body_is_a_bad_request() -> None:
    zipped = gzip.compress(b"x" * 100_000)
    with pytest.raises(BadRequestError, match="truncated"):
        asyncio.run(inflate([zipped[:-20]], "gzip", LIMIT, None))
    with pytest.raises(BadRequestError, match="cannot decompress"):
        asyncio.run(inflate([b"not gzip at all"], "gzip", LIMIT, None))
    with pytest.raises(BadRequestError, match="unsupported Content-Encoding"):
        asyncio.run(inflate([zipped], "br", LIMIT, None))


def test_a_plain_body_is_joined() -> None:
    assert joined([b"ab", b"cd"]) == b"abcd"
