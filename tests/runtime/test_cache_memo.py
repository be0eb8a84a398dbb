"""The answer memo: an entry answers only the exact request it was kept for (the digest only
finds it), digests that separate what renders differently (and the transports), an LRU bounded
by bytes (answers and the requests they answer), counted, flushed and forgotten per model."""

from __future__ import annotations

import tracemalloc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from cachefleet.runtime.cache.api import CacheStatus, LocalEntryToken
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.local import LocalTier
from cachefleet.runtime.cache.memo import (
    MemoEntry,
    MemoKey,
    ResponseMemo,
    entry_footprint,
)
from cachefleet.runtime.cache.tier import TierFigures
from cachefleet.runtime.grpc.infer import SCOPE as GRPC_SCOPE
from cachefleet.runtime.http.infer_answers import http_scope
from cachefleet.runtime.models.types import ModelConfig
from cachefleet.runtime.tensor import Tensor

#: How the cache answered the requests these entries are kept for.
HIT = CacheStatus.HIT_LOCAL


@dataclass
class FakeModel:
    """Only identity fields: the memo never runs a model."""

    name: str
    version: str = "1"
    labels: Mapping[str, Sequence[str]] = field(default_factory=dict)
    quick: bool = False
    fingerprint: str = "ab" * 32

    @property
    def config(self) -> ModelConfig:
        raise NotImplementedError

    def run(self, inputs: Sequence[Tensor]) -> list[Tensor]:
        raise NotImplementedError


def request_digest_of(
    memo: ResponseMemo, model: FakeModel, body: bytes, header_length: int | None
) -> bytes:
    """The digest of a whole body at hand, as the server computes it piece by piece."""
    hasher = memo.hasher(http_scope(model.name, model.version, header_length))
    hasher.update(body)
    digest: bytes = hasher.digest()
    return digest


def http_key(
    digest: bytes, model: str, version: str | None, length: int | None, body: Sequence[bytes]
) -> MemoKey:
    """An HTTP request's key, as the server makes it."""
    return ResponseMemo.key(digest, http_scope(model, version, length), body)


def tagged(tag: bytes) -> MemoKey:
    """A key whose request is ``tag`` itself (a digest is whatever finds the entry)."""
    return MemoKey(tag, (b"", tag))


KEY = CacheKey("m", "1", bytes(32))


def token(key: CacheKey = KEY, identity: object | None = None) -> LocalEntryToken:
    """A liveness token that nothing confirms: the memo only keeps it."""
    return LocalEntryToken(key, identity or object(), lambda key, identity, started: None)


def test_digests_separate_models_versions_header_lengths_and_bodies() -> None:
    m1, m2, v2 = FakeModel("m"), FakeModel("n"), FakeModel("m", "2")
    body = b'{"inputs": []}'
    memo = ResponseMemo(1 << 20)

    def request_digest(model: FakeModel, body: bytes, header_length: int | None) -> bytes:
        return request_digest_of(memo, model, body, header_length)

    digests = {
        request_digest(m1, body, None),
        request_digest(m2, body, None),
        request_digest(v2, body, None),
        request_digest(m1, body, 3),
        request_digest(m1, body, 2**64),  # any client number: the request is refused later
        request_digest(m1, body, -1),
        request_digest(m1, body + b" ", None),
        # The length prefixes keep the name/version boundary: "m"+"11" is not "m1"+"1".
        request_digest(FakeModel("m1", "1"), body, None),
        request_digest(FakeModel("m", "11"), body, None),
    }
    assert len(digests) == 9
    assert request_digest(m1, body, None) == request_digest(FakeModel("m"), body, None)


def test_the_memo_is_an_lru_bounded_by_bytes() -> None:
    response = b"x" * 100
    model = FakeModel("m")
    plain = MemoEntry(response, model, token(), "m", "", HIT, request=(b"", bytes([0])))
    size = entry_footprint(bytes([0]), plain)  # with the one-byte request it answers
    headed = MemoEntry(
        response, model, token(), "m", "1", HIT, [(b"x-cache", b"hit-local")], (b"", bytes([3]))
    )
    big = entry_footprint(bytes([3]), headed)
    memo = ResponseMemo(2 * size + big)
    for index in range(3):
        memo.insert(tagged(bytes([index])), MemoEntry(response, model, token(), "m", "", HIT))
    assert memo.lookup(tagged(bytes([0]))) is not None  # 0 is now the most recently used
    memo.insert(
        tagged(bytes([3])),
        MemoEntry(response, model, token(), "m", "1", HIT, [(b"x-cache", b"hit-local")]),
    )

    assert memo.lookup(tagged(bytes([1]))) is None
    assert [memo.lookup(tagged(bytes([i]))) is not None for i in (0, 2, 3)] == [True] * 3
    assert memo.figures().bytes == 2 * size + big <= memo.max_bytes
    found = memo.lookup(tagged(bytes([3])))
    assert found is not None
    assert (found.body, found.name, found.version) == (response, "m", "1")
    assert found.headers == [(b"x-cache", b"hit-local")]

    assert not memo.insert(
        tagged(b"big"), MemoEntry(b"y" * (3 * size), model, token(), "m", "", HIT)
    )
    assert memo.lookup(tagged(b"big")) is None
    assert len(memo) == 3
    memo.delete(tagged(bytes([0])))
    assert memo.figures().bytes == size + big
    # 5 lookups found an entry, one of which its caller gave back as stale (a miss); 2 found
    # none.
    assert memo.figures() == TierFigures(2, size + big, hits=4, misses=3, evictions=1)


def test_an_entry_answers_only_the_request_it_was_kept_for() -> None:
    """Two requests under one digest (a collision, however made): each is answered only with
    its own entry, never the other's; the entry is charged for the request it keeps."""
    memo = ResponseMemo(1 << 20)
    model = FakeModel("m")
    body = b"\x00" * 1000
    kept = http_key(b"d" * 16, "m", None, 12, (body,))
    assert memo.insert(kept, MemoEntry(b"answer", model, token(), "m", "", HIT))
    scope = http_scope("m", None, 12)
    assert memo.figures().bytes == entry_footprint(
        kept.digest, MemoEntry(b"answer", model, token(), "m", "", HIT, request=(scope, body))
    )
    for name, version, length, parts in (
        ("m", None, 12, (body[:500], body[500:-1] + b"\x01")),  # one byte of the body
        ("m", None, 12, (body[:500], body[500:-1])),  # a byte short
        ("m", None, 13, (body,)),  # the header length
        ("m", "1", 12, (body,)),  # a version named where the entry's was not
        ("n", None, 12, (body,)),  # the model
    ):
        stranger = http_key(kept.digest, name, version, length, parts)
        assert memo.lookup(stranger) is None
        memo.delete(stranger)  # a stranger cannot drop the entry either
    assert memo.lookup(MemoKey(kept.digest, (GRPC_SCOPE, body))) is None  # a gRPC message
    # The same body in any pieces is the same request.
    pieces = (body[:1], body[1:700], b"", body[700:])
    found = memo.lookup(http_key(kept.digest, "m", None, 12, pieces))
    assert found is not None
    assert found.body == b"answer"
    assert memo.figures() == TierFigures(1, memo.figures().bytes, hits=1, misses=6, evictions=0)


def test_each_memo_draws_its_own_digest_seed() -> None:
    """Nobody outside the process can aim two requests at one digest: the seed is the
    memo's own (the comparison would refuse the stranger anyway)."""
    message = b"\n\x06simple"
    first, second = ResponseMemo(1 << 20), ResponseMemo(1 << 20)
    assert first.key_of(GRPC_SCOPE, message).digest != second.key_of(GRPC_SCOPE, message).digest
    assert first.key_of(GRPC_SCOPE, message) == first.key_of(GRPC_SCOPE, message)


def test_a_body_hashed_in_pieces_has_the_digest_of_the_whole() -> None:
    memo = ResponseMemo(1 << 20)
    body = bytes(range(256)) * 40
    hasher = memo.hasher(http_scope("m", "1", 12))
    for start in range(0, len(body), 1000):
        hasher.update(body[start : start + 1000])
    assert hasher.digest() == request_digest_of(memo, FakeModel("m"), body, 12)
    # No version (the latest) is its own request: it may resolve to another model later.
    latest = memo.hasher(http_scope("m", None, 12))
    latest.update(body)
    assert latest.digest() != hasher.digest()


def test_memo_and_local_tier_together_stay_within_their_bounds() -> None:
    """The scenario of a memo entry per local entry, with the local tier evicting: memo entries
    keep a bare identity of the local entry, so evicted tensors are freed, and the two together
    hold about their two bounds (a memo that kept the entries held many times its budget)."""
    local = LocalTier(max_bytes=2 << 20)
    memo = ResponseMemo(max_bytes=local.max_bytes // 8)
    model = FakeModel("m")
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(400):
            key = CacheKey("m", "1", index.to_bytes(32, "little"))
            output = Tensor("out", "UINT8", (64 * 1024,), bytes([index % 256]) * (64 * 1024))
            local.insert(key, [output], ttl_s=0)
            entry = local.entry(key)
            assert entry is not None
            digest = index.to_bytes(32, "little")
            memo.insert(
                tagged(digest), MemoEntry(b"r" * 200, model, token(key, entry), "m", "", HIT)
            )
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(memo) > 40  # many memo entries outlived their local entries
    assert held - before < local.max_bytes + memo.max_bytes + (1 << 20)


def test_forgetting_or_flushing_a_model_drops_its_answers_only() -> None:
    memo = ResponseMemo(max_bytes=10_000)
    for digest, name in ((b"a", "m"), (b"b", "n"), (b"c", "m")):
        memo.insert(tagged(digest * 32), MemoEntry(b"x", FakeModel(name), token(), name, "", HIT))
    assert memo.flush("m") == 2
    assert memo.lookup(tagged(b"a" * 32)) is None
    assert memo.lookup(tagged(b"b" * 32)) is not None
    assert memo.figures().bytes == entry_footprint(
        b"b" * 32, MemoEntry(b"x", FakeModel("n"), token(), "n", "", HIT, request=(b"", b"b" * 32))
    )
    memo.forget_model("n")
    assert len(memo) == 0
    assert memo.flush("n") == 0


def test_the_memo_says_which_models_it_holds_answers_of() -> None:
    """What lets a transport skip the digest and the lookup of a request whose model has
    nothing here: held from the first entry kept to the last one gone (replaced, evicted,
    given back as stale, flushed); a request not looked up for it counts as the miss its
    lookup would have been."""
    model = FakeModel("m")
    one = MemoEntry(b"x" * 100, model, token(), "m", "", HIT)
    memo = ResponseMemo(entry_footprint(b"a" * 32, one) + 64)  # room for one such entry
    assert not memo.holds("m")
    assert memo.figures().misses == 1
    memo.insert(tagged(b"a" * 32), one)
    memo.insert(tagged(b"a" * 32), MemoEntry(b"x" * 100, model, token(), "m", "", HIT))  # replaced
    assert memo.holds("m")
    assert not memo.holds("n")
    memo.insert(tagged(b"b" * 32), MemoEntry(b"x" * 100, FakeModel("n"), token(), "n", "", HIT))
    assert memo.holds("n")
    assert not memo.holds("m")  # m's one entry evicted for n's
    assert memo.lookup(tagged(b"b" * 32)) is not None
    memo.delete(tagged(b"b" * 32))  # given back as stale
    assert not memo.holds("n")
    # Four requests not looked up, and the stale entry's lookup: five misses, no hit.
    assert (memo.figures().hits, memo.figures().misses) == (0, 5)
    roomy = ResponseMemo(max_bytes=10_000)
    for digest in (b"c", b"d"):
        roomy.insert(tagged(digest * 32), MemoEntry(b"x", model, token(), "m", "", HIT))
    assert roomy.flush("m") == 2
    assert not roomy.holds("m")


def test_an_http_answer_is_never_a_grpc_answer() -> None:
    """The transports' scopes start with their own domains: no HTTP body, however chosen, is
    a gRPC message's request (or back), and the memo itself knows neither."""
    memo = ResponseMemo(1 << 20)
    message = b"\n\x06simple"
    scope = http_scope("", None, None)
    hasher = memo.hasher(scope)
    hasher.update(message)
    http = ResponseMemo.key(hasher.digest(), scope, (message,))
    grpc = memo.key_of(GRPC_SCOPE, message)
    assert http.digest != grpc.digest
    assert http.request != grpc.request
    memo.insert(grpc, MemoEntry(b"grpc answer", FakeModel("simple"), token(), "simple", "", HIT))
    assert memo.lookup(MemoKey(grpc.digest, http.request)) is None


def test_the_memo_holds_what_it_is_charged_for_small_entries() -> None:
    """Filled with small HTTP entries as the server makes them (40-byte answers, a 220-byte
    request, its headers, a token): tracemalloc's held bytes are within 1.2 times the charge
    (a flat 320 bytes per entry once held 1.6-2.4 times it)."""
    from cachefleet.runtime.http.infer_codec import answer_headers

    memo = ResponseMemo(max_bytes=4 << 20)
    model = FakeModel("simple")
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for index in range(40_000):
            body = index.to_bytes(8, "little") * 28  # a 224-byte request body, its own bytes
            digest = request_digest_of(memo, model, body, 180)
            name = b"simple".decode()  # the path's name: a string of its own per request
            key = http_key(digest, name, None, 180, (body,))
            answer = index.to_bytes(8, "little") * 5
            local = token(CacheKey(name, "1", index.to_bytes(32, "little")), object())
            headers = answer_headers(answer, 30, b"hit-local")
            memo.insert(key, MemoEntry(answer, model, local, name, "", HIT, headers))
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    charged = memo.figures().bytes
    assert charged is not None
    assert memo.figures().evictions > 0  # the bound was reached
    assert charged / 1.2 <= held - before <= 1.2 * charged, (held - before, charged)
