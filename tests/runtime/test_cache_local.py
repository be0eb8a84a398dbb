"""The local tier: a byte-bounded, TTL-aware LRU that is safe from many threads."""

from __future__ import annotations

import gc
import random
import threading

import numpy as np

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.local import LocalTier, entry_size
from cachefleet.runtime.cache.tier import TierFigures
from cachefleet.runtime.tensor import Tensor


class Clock:
    """A clock the test moves by hand, so TTL tests never sleep."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def key(index: int, model: str = "m") -> CacheKey:
    return CacheKey(model, "1", index.to_bytes(32, "little"))


def outputs(size: int) -> list[Tensor]:
    return [Tensor("y", "UINT8", (size,), bytes(size))]


def get(tier: LocalTier, at: CacheKey) -> list[Tensor] | None:
    found = tier.lookup(at)
    return None if found is None else found.outputs


def test_hit_returns_what_was_put() -> None:
    tier = LocalTier(10_000)
    assert get(tier, key(1)) is None
    assert tier.insert(key(1), outputs(100), ttl_s=60)
    assert get(tier, key(1)) == outputs(100)


def test_least_recently_used_goes_first_and_the_bound_holds() -> None:
    one = entry_size(outputs(1000))
    tier = LocalTier(3 * one)
    for index in range(3):
        tier.insert(key(index), outputs(1000), ttl_s=60)
    assert get(tier, key(0)) is not None  # 0 is now more recent than 1
    tier.insert(key(3), outputs(1000), ttl_s=60)
    assert get(tier, key(1)) is None
    assert all(get(tier, key(i)) is not None for i in (0, 2, 3))
    assert tier.size_bytes == 3 * one


def test_bound_is_in_bytes_not_entries() -> None:
    tier = LocalTier(entry_size(outputs(5000)) + entry_size(outputs(10)))
    tier.insert(key(0), outputs(5000), ttl_s=60)
    tier.insert(key(1), outputs(10), ttl_s=60)
    tier.insert(key(2), outputs(10), ttl_s=60)  # evicts the big one, not a small one
    assert get(tier, key(0)) is None
    assert get(tier, key(1)) is not None
    assert get(tier, key(2)) is not None


def test_an_entry_larger_than_the_bound_is_not_stored() -> None:
    tier = LocalTier(1000)
    tier.insert(key(0), outputs(10), ttl_s=60)
    assert not tier.insert(key(1), outputs(5000), ttl_s=60)
    assert get(tier, key(0)) is not None


def test_bound_is_never_exceeded_under_random_load() -> None:
    sizes: list[int] = []
    tier = LocalTier(50_000, on_size=sizes.append)
    rng = random.Random(7)
    for _ in range(2000):
        tier.insert(key(rng.randrange(300)), outputs(rng.randrange(0, 20_000)), ttl_s=60)
        get(tier, key(rng.randrange(300)))
    assert max(sizes) <= 50_000
    assert sizes[-1] == tier.size_bytes


def test_entries_expire_after_their_ttl() -> None:
    clock = Clock()
    tier = LocalTier(10_000, clock=clock)
    tier.insert(key(0), outputs(10), ttl_s=5)
    tier.insert(key(1), outputs(10), ttl_s=0)  # 0: no expiry
    clock.now = 4.9
    assert get(tier, key(0)) is not None
    clock.now = 5.0
    assert get(tier, key(0)) is None
    assert tier.size_bytes == entry_size(outputs(10))
    clock.now = 1e9
    assert get(tier, key(1)) is not None


def test_a_flush_drops_only_that_model() -> None:
    tier = LocalTier(100_000)
    for index in range(5):
        tier.insert(key(index, "a"), outputs(10), ttl_s=60)
        tier.insert(key(index, "b"), outputs(10), ttl_s=60)
    assert tier.flush("a") == 5
    assert get(tier, key(0, "a")) is None
    assert get(tier, key(0, "b")) is not None
    assert len(tier) == 5


def test_threads_hammering_it_keep_it_consistent() -> None:
    tier = LocalTier(200_000)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        rng = random.Random(seed)
        try:
            for _ in range(3000):
                index = rng.randrange(500)
                if rng.random() < 0.5:
                    tier.insert(key(index), outputs(rng.randrange(1, 3000)), ttl_s=60)
                else:
                    found = get(tier, key(index))
                    assert found is None or found[0].name == "y"
        except BaseException as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert tier.size_bytes <= 200_000
    stored = sum(entry_size(get(tier, key(i)) or []) for i in range(500) if get(tier, key(i)))
    assert stored == tier.size_bytes


def test_returned_list_is_a_copy() -> None:
    tier = LocalTier(10_000)
    tier.insert(key(0), outputs(10), ttl_s=60)
    first = get(tier, key(0))
    assert first is not None
    first.clear()
    assert get(tier, key(0)) == outputs(10)


def test_numpy_outputs_round_trip() -> None:
    tier = LocalTier(10**6)
    tensor = Tensor.from_numpy("fc6_1", np.ones((1000, 1, 1), dtype=np.float32))
    tier.insert(key(0), [tensor], ttl_s=60)
    found = get(tier, key(0))
    assert found is not None
    np.testing.assert_array_equal(found[0].to_numpy(), np.ones((1000, 1, 1), dtype=np.float32))


def test_an_entry_identity_lives_exactly_as_long_as_the_entry() -> None:
    """What the rendered-response memo relies on: a put, an eviction, expiry and a flush each
    end the identity that ``entry`` returned, and a lookup does not."""
    clock = Clock()
    size = entry_size(outputs(100))
    tier = LocalTier(3 * size, clock=clock)
    assert tier.entry(key(1)) is None
    tier.insert(key(1), outputs(100), ttl_s=10)
    held = tier.entry(key(1))
    assert held is not None
    assert get(tier, key(1)) == outputs(100)
    assert tier.entry(key(1)) is held

    tier.insert(key(1), outputs(100), ttl_s=10)  # replaced, even with equal contents
    assert tier.entry(key(1)) is not held

    held = tier.entry(key(1))
    for other in range(2, 5):  # three more entries: key 1 is the least recently used
        tier.insert(key(other), outputs(100), ttl_s=10)
    assert tier.entry(key(1)) is None

    tier.insert(key(1), outputs(100), ttl_s=10)
    held = tier.entry(key(1))
    clock.now += 10
    assert tier.entry(key(1)) is None

    tier.insert(key(1), outputs(100), ttl_s=10)
    assert tier.entry(key(1)) is not None
    tier.flush("m")
    assert tier.entry(key(1)) is None


def test_a_full_tier_gives_the_garbage_collector_nothing_to_walk() -> None:
    """Entries are untracked by the collector: with them tracked, every full collection walked
    the whole tier (a pause of ~0.4 s with 256 MiB of small entries)."""
    tier = LocalTier(10**8)
    gc.collect()
    before = len(gc.get_objects())
    for index in range(20_000):
        array = np.full((1, 4), index, dtype=np.int32)
        tier.insert(key(index), [Tensor.from_numpy("y", array), Tensor.from_numpy("z", array)], 60)
    for _ in range(4):  # the collector untracks nested tuples one level per pass
        gc.collect()
    assert len(tier) == 20_000
    assert len(gc.get_objects()) - before < 1_000
    hit = get(tier, key(7))
    assert hit is not None
    assert [t.name for t in hit] == ["y", "z"]
    assert hit[0].to_numpy().tolist() == [[7, 7, 7, 7]]


def test_figures_count_what_the_tier_did() -> None:
    """Entries, bytes, hits, misses and evictions, as every tier reports them."""
    one = entry_size(outputs(1000))
    tier = LocalTier(2 * one)
    tier.insert(key(0), outputs(1000), ttl_s=60)
    tier.insert(key(1), outputs(1000), ttl_s=60)
    tier.insert(key(2), outputs(1000), ttl_s=60)  # evicts 0
    assert get(tier, key(0)) is None
    assert get(tier, key(2)) is not None
    assert tier.figures() == TierFigures(2, 2 * one, hits=1, misses=1, evictions=1)
