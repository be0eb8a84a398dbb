"""The local tier: a byte-bounded, TTL-aware LRU that is safe from many threads."""

from __future__ import annotations

import gc
import random
import threading

import numpy as np

from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.local import LocalTier, entry_size
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


def test_hit_returns_what_was_put() -> None:
    tier = LocalTier(10_000)
    assert tier.get(key(1)) is None
    assert tier.put(key(1), outputs(100), ttl_s=60)
    assert tier.get(key(1)) == outputs(100)


def test_least_recently_used_goes_first_and_the_bound_holds() -> None:
    one = entry_size(outputs(1000))
    tier = LocalTier(3 * one)
    for index in range(3):
        tier.put(key(index), outputs(1000), ttl_s=60)
    assert tier.get(key(0)) is not None  # 0 is now more recent than 1
    tier.put(key(3), outputs(1000), ttl_s=60)
    assert tier.get(key(1)) is None
    assert all(tier.get(key(i)) is not None for i in (0, 2, 3))
    assert tier.size_bytes == 3 * one


def test_bound_is_in_bytes_not_entries() -> None:
    tier = LocalTier(entry_size(outputs(5000)) + entry_size(outputs(10)))
    tier.put(key(0), outputs(5000), ttl_s=60)
    tier.put(key(1), outputs(10), ttl_s=60)
    tier.put(key(2), outputs(10), ttl_s=60)  # evicts the big one, not a small one
    assert tier.get(key(0)) is None
    assert tier.get(key(1)) is not None
    assert tier.get(key(2)) is not None


def test_an_entry_larger_than_the_bound_is_not_stored() -> None:
    tier = LocalTier(1000)
    tier.put(key(0), outputs(10), ttl_s=60)
    assert not tier.put(key(1), outputs(5000), ttl_s=60)
    assert tier.get(key(0)) is not None


def test_bound_is_never_exceeded_under_random_load() -> None:
    sizes: list[int] = []
    tier = LocalTier(50_000, on_size=sizes.append)
    rng = random.Random(7)
    for _ in range(2000):
        tier.put(key(rng.randrange(300)), outputs(rng.randrange(0, 20_000)), ttl_s=60)
        tier.get(key(rng.randrange(300)))
    assert max(sizes) <= 50_000
    assert sizes[-1] == tier.size_bytes


def test_entries_expire_after_their_ttl() -> None:
    clock = Clock()
    tier = LocalTier(10_000, clock=clock)
    tier.put(key(0), outputs(10), ttl_s=5)
    tier.put(key(1), outputs(10), ttl_s=0)  # 0: no expiry
    clock.now = 4.9
    assert tier.get(key(0)) is not None
    clock.now = 5.0
    assert tier.get(key(0)) is None
    assert tier.size_bytes == entry_size(outputs(10))
    clock.now = 1e9
    assert tier.get(key(1)) is not None


def test_remove_model_drops_only_that_model() -> None:
    tier = LocalTier(100_000)
    for index in range(5):
        tier.put(key(index, "a"), outputs(10), ttl_s=60)
        tier.put(key(index, "b"), outputs(10), ttl_s=60)
    assert tier.remove_model("a") == 5
    assert tier.get(key(0, "a")) is None
    assert tier.get(key(0, "b")) is not None
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
                    tier.put(key(index), outputs(rng.randrange(1, 3000)), ttl_s=60)
                else:
                    found = tier.get(key(index))
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
    stored = sum(entry_size(tier.get(key(i)) or []) for i in range(500) if tier.get(key(i)))
    assert stored == tier.size_bytes


def test_returned_list_is_a_copy() -> None:
    tier = LocalTier(10_000)
    tier.put(key(0), outputs(10), ttl_s=60)
    first = tier.get(key(0))
    assert first is not None
    first.clear()
    assert tier.get(key(0)) == outputs(10)


def test_numpy_outputs_round_trip() -> None:
    tier = LocalTier(10**6)
    tensor = Tensor.from_numpy("fc6_1", np.ones((1000, 1, 1), dtype=np.float32))
    tier.put(key(0), [tensor], ttl_s=60)
    found = tier.get(key(0))
    assert found is not None
    np.testing.assert_array_equal(found[0].to_numpy(), np.ones((1000, 1, 1), dtype=np.float32))


def test_an_entry_identity_lives_exactly_as_long_as_the_entry() -> None:
    """What the rendered-response memo relies on: a put, an eviction, expiry and a flush each
    end the identity that ``entry`` returned, and a lookup does not."""
    clock = Clock()
    size = entry_size(outputs(100))
    tier = LocalTier(3 * size, clock=clock)
    assert tier.entry(key(1)) is None
    tier.put(key(1), outputs(100), ttl_s=10)
    held = tier.entry(key(1))
    assert held is not None
    assert tier.get(key(1)) == outputs(100)
    assert tier.entry(key(1)) is held

    tier.put(key(1), outputs(100), ttl_s=10)  # replaced, even with equal contents
    assert tier.entry(key(1)) is not held

    held = tier.entry(key(1))
    for other in range(2, 5):  # three more entries: key 1 is the least recently used
        tier.put(key(other), outputs(100), ttl_s=10)
    assert tier.entry(key(1)) is None

    tier.put(key(1), outputs(100), ttl_s=10)
    held = tier.entry(key(1))
    clock.now += 10
    assert tier.entry(key(1)) is None

    tier.put(key(1), outputs(100), ttl_s=10)
    assert tier.entry(key(1)) is not None
    tier.remove_model("m")
    assert tier.entry(key(1)) is None


def test_a_full_tier_gives_the_garbage_collector_nothing_to_walk() -> None:
    """Entries are untracked by the collector: with them tracked, every full collection walked
    the whole tier (a pause of ~0.4 s with 256 MiB of small entries)."""
    tier = LocalTier(10**8)
    gc.collect()
    before = len(gc.get_objects())
    for index in range(20_000):
        array = np.full((1, 4), index, dtype=np.int32)
        tier.put(key(index), [Tensor.from_numpy("y", array), Tensor.from_numpy("z", array)], 60)
    for _ in range(4):  # the collector untracks nested tuples one level per pass
        gc.collect()
    assert len(tier) == 20_000
    assert len(gc.get_objects()) - before < 1_000
    hit = tier.get(key(7))
    assert hit is not None
    assert [t.name for t in hit] == ["y", "z"]
    assert hit[0].to_numpy().tolist() == [[7, 7, 7, 7]]
