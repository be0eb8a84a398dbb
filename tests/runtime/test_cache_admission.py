"""Cache admission: the policy's decisions from injected costs (no clock, no sleeping), and
what the read-through cache does with them over a real local tier."""

from __future__ import annotations

import numpy as np
from support.cache_doubles import Model, ask, local_tier, metric, request, settings

from cachefleet.runtime.cache.admission import (
    AdmissionPolicy,
    AdmissionTuning,
    ModelAdmission,
    TierAdmission,
    in_sample,
)
from cachefleet.runtime.cache.admission_metrics import AdmissionCollector
from cachefleet.runtime.cache.api import CacheStatus
from cachefleet.runtime.cache.factory import build_admission, build_cache
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.service.statistics import StatisticsRegistry
from cachefleet.runtime.tensor import Tensor

TUNING = AdmissionTuning(min_lookups=8, min_computes=2, probe_floor=100)
US = 1e-6


def key(first_byte: int) -> CacheKey:
    """A key whose digest starts with ``first_byte`` (0 is in the sample of large inputs)."""
    return CacheKey("simple", "1", bytes([first_byte]) + bytes(31))


SAMPLED, OUTSIDE = True, False  # a request in the content sample, and one outside it


def observe(
    model: ModelAdmission,
    tier: TierAdmission,
    *,
    compute_s: float,
    lookup_s: float,
    insert_s: float,
    hit: bool,
    times: int,
) -> None:
    for _ in range(times):
        model.computed(compute_s)
        tier.inserted(insert_s)
        tier.looked_up(lookup_s, hit)


def test_a_fresh_model_is_admitted_and_undecided_until_enough_lookups() -> None:
    policy = AdmissionPolicy("auto", ("local", "redis"), TUNING)
    assert policy.admitted("simple", "redis")
    assert policy.expected_saving("simple", "redis") is None
    model = policy.of("simple", "1")
    observe(model, model.tier("redis"), compute_s=10 * US, lookup_s=200 * US, insert_s=20 * US,
            hit=False, times=TUNING.min_lookups - 1)  # fmt: skip
    assert policy.admitted("simple", "redis", "1"), "no decision before min_lookups"
    observe(model, model.tier("redis"), compute_s=10 * US, lookup_s=200 * US, insert_s=20 * US,
            hit=False, times=1)  # fmt: skip
    assert not policy.admitted("simple", "redis", "1")
    assert model.tier("local").admitted, "tiers are decided apart"
    assert policy.expected_saving("simple", "redis") == -220 * US


def test_a_hit_that_costs_more_than_computing_is_skipped() -> None:
    """``simple`` over Redis: even at a 100 % hit ratio, a round trip costs more than the run."""
    policy = AdmissionPolicy("auto", ("redis",), TUNING)
    model = policy.of("simple", "1")
    observe(model, model.tier("redis"), compute_s=40 * US, lookup_s=150 * US, insert_s=20 * US,
            hit=True, times=20)  # fmt: skip
    assert not policy.admitted("simple", "redis")
    saving = policy.expected_saving("simple", "redis")
    assert saving is not None
    assert abs(saving - (-110 * US)) < 1e-12


def test_an_expensive_model_keeps_its_tiers_at_a_low_hit_ratio() -> None:
    policy = AdmissionPolicy("auto", ("local", "redis"), TUNING)
    model = policy.of("densenet_onnx", "1")
    for index in range(40):
        model.computed(30_000 * US)
        model.tier("local").inserted(20 * US)
        model.tier("local").looked_up(5 * US, hit=index % 10 == 0)  # 10 % hits
    assert model.tier("local").admitted
    saving = model.tier("local").expected_saving()
    assert saving is not None
    assert saving > 2_000 * US


def test_a_skipped_tier_is_probed_by_content_sample_and_by_budget() -> None:
    policy = AdmissionPolicy("auto", ("redis",), TUNING)
    model = policy.of("simple", "1")
    # compute 100 us, a probe 100 us: 2 % of compute pays one probe every 50 requests.
    observe(model, model.tier("redis"), compute_s=100 * US, lookup_s=80 * US, insert_s=20 * US,
            hit=False, times=10)  # fmt: skip
    assert not model.tier("redis").admitted
    assert all(model.tier("redis").wants(SAMPLED) for _ in range(10)), "the sample always goes"
    probes = sum(model.tier("redis").wants(OUTSIDE) for _ in range(500))
    assert 9 <= probes <= 10  # 500 / 50, give or take the last float rounding


def test_a_cheap_tier_of_a_cheap_model_is_probed_at_least_at_the_floor() -> None:
    policy = AdmissionPolicy("auto", ("redis",), TUNING)
    model = policy.of("simple", "1")
    observe(model, model.tier("redis"), compute_s=1 * US, lookup_s=1_000 * US, insert_s=0.0,
            hit=False, times=10)  # fmt: skip
    probes = sum(model.tier("redis").wants(OUTSIDE) for _ in range(1_000))
    assert probes == 1_000 // TUNING.probe_floor


def test_the_decision_flips_back_when_the_tier_starts_saving() -> None:
    """Traffic turns repetitive and the model slower: the probes see it, the tier comes back."""
    policy = AdmissionPolicy("auto", ("local",), TUNING)
    model = policy.of("simple", "1")
    observe(model, model.tier("local"), compute_s=20 * US, lookup_s=3 * US, insert_s=4 * US,
            hit=False, times=10)  # fmt: skip
    assert not model.tier("local").admitted
    for _ in range(10):  # probes that hit, of a model that got expensive
        model.computed(500 * US)
        model.tier("local").looked_up(3 * US, hit=True)
    assert model.tier("local").admitted


def test_a_model_whose_requests_all_hit_is_recomputed_now_and_then() -> None:
    """Its compute time is refreshed, paid for by 2 % of its lookup time."""
    policy = AdmissionPolicy("auto", ("local", "redis"), TUNING)
    model = policy.of("simple", "1")
    assert not model.recomputes(), "nothing measured yet: a fresh model caches as before"
    observe(model, model.tier("local"), compute_s=100 * US, lookup_s=50 * US, insert_s=5 * US,
            hit=True, times=10)  # fmt: skip
    # 2 % of a 50 us lookup is 1 us a request: a 100 us computation every 100 requests.
    recomputed = sum(model.recomputes() for _ in range(1_000))
    assert 9 <= recomputed <= 10
    assert not AdmissionPolicy("always", ("local",), TUNING).of("simple", "1").recomputes()


def test_a_model_never_computed_here_is_computed_once_its_tiers_are_looked_up_enough() -> None:
    """Answers that all come from entries another server left leave no compute time, and so
    no decision: a request is computed to measure it, at most one in 1 / probe_budget."""
    policy = AdmissionPolicy("auto", ("redis",), TUNING)
    model = policy.of("simple", "1")
    for _ in range(TUNING.min_lookups):
        assert not model.recomputes(), "undecided: a fresh model caches as before"
        model.tier("redis").looked_up(100 * US, hit=True)
    assert model.compute_s.count == 0
    assert model.recomputes(), "measured lookups, never a computation: measure one"
    # Until that computation lands, its lookup's worth of credit is paid back first.
    later = [model.recomputes() for _ in range(round(1 / TUNING.probe_budget))]
    assert later.count(True) <= 1
    model.computed(20 * US)
    model.tier("redis").looked_up(100 * US, hit=True)
    assert AdmissionPolicy("always", ("redis",), TUNING).of("simple", "1").recomputes() is False


def test_a_model_at_the_boundary_does_not_flap() -> None:
    policy = AdmissionPolicy("auto", ("local",), TUNING)
    model = policy.of("simple", "1")
    # 50 % hits: saving = 0.5 * 20 - (8 + 0.5 * 4) = 0 us, inside the margin either way.
    for index in range(64):
        model.computed(20 * US)
        model.tier("local").inserted(4 * US)
        model.tier("local").looked_up(8 * US, hit=index % 2 == 0)
        assert model.tier("local").admitted


def test_always_measures_but_never_skips() -> None:
    policy = AdmissionPolicy("always", ("local", "redis"), TUNING)
    model = policy.of("simple", "1")
    observe(model, model.tier("redis"), compute_s=1 * US, lookup_s=500 * US, insert_s=50 * US,
            hit=False, times=100)  # fmt: skip
    assert model.tier("redis").admitted
    assert model.tier("redis").wants(OUTSIDE)
    (figures,) = [each for each in policy.figures("simple", "1") if each.tier == "redis"]
    assert figures.lookups == 100
    assert figures.expected_saving_s is not None
    assert figures.expected_saving_s < 0


def test_figures_statistics_metrics_and_forgetting() -> None:
    policy = AdmissionPolicy("auto", ("local", "redis"), TUNING)
    assert [each.admitted for each in policy.figures("simple", "1")] == [True, True]
    model = policy.of("simple", "1")
    observe(model, model.tier("redis"), compute_s=10 * US, lookup_s=200 * US, insert_s=20 * US,
            hit=False, times=10)  # fmt: skip

    statistics = StatisticsRegistry(policy)
    (document,) = statistics.report([("simple", "1")], "simple")["model_stats"]
    tiers = {each["tier"]: each for each in document["cache_admission"]}
    assert (tiers["local"]["admitted"], tiers["redis"]["admitted"]) == (True, False)
    assert tiers["redis"]["expected_saving_ns"] == -220_000
    assert tiers["redis"]["lookup_ns"] == 200_000
    assert tiers["redis"]["lookups"] == 10

    metrics = RuntimeMetrics()
    metrics.registry.register(AdmissionCollector(policy))
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "cachefleet_cache_admitted", **labels, tier="redis") == 0
    assert metric(metrics, "cachefleet_cache_admitted", **labels, tier="local") == 1
    assert metric(metrics, "cachefleet_cache_admission_compute_seconds", **labels) == 10 * US

    statistics.forget("simple")  # an unload: measured afresh when it comes back
    assert policy.admitted("simple", "redis")


def _primed(cache: ReadThroughCache, **costs: float) -> None:
    """Feed the cache's policy a long history for ``simple`` 1 local tier (a few real requests
    then move its averages by a thousandth each)."""
    model = cache.admission.of("simple", "1")
    observe(model, model.tier("local"), hit=False, times=1_000, **costs)


async def test_auto_skips_the_local_tier_for_a_model_it_only_costs() -> None:
    cache = build_cache(settings("local"), RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    _primed(cache, compute_s=1 * US, lookup_s=1_000 * US, insert_s=1_000 * US)
    model = Model()
    for _ in range(3):
        assert (await ask(cache, request(7), model))[1] is CacheStatus.BYPASS
    assert model.runs == 3
    assert len(local_tier(cache)) == 0, "nothing inserted"
    metrics = cache.metrics
    assert metric(metrics, "cachefleet_cache_bypass_total", model="simple", version="1") == 3
    assert metric(metrics, "cachefleet_cache_admitted", model="simple", version="1",
                  tier="local") == 0  # fmt: skip


async def test_always_keeps_caching_whatever_the_figures() -> None:
    cache = build_cache(settings("local", admission="always"), RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    _primed(cache, compute_s=1 * US, lookup_s=1_000 * US, insert_s=1_000 * US)
    model = Model()
    statuses = [(await ask(cache, request(7), model))[1] for _ in range(3)]
    assert statuses == [CacheStatus.MISS, CacheStatus.HIT_LOCAL, CacheStatus.HIT_LOCAL]
    assert model.runs == 1


async def test_the_sample_still_goes_through_a_skipped_tier() -> None:
    """A request in the content sample is looked up and inserted as before, so its repeats keep
    measuring the hit ratio the tier would have; one outside it is computed each time."""
    cache = build_cache(settings("local"), RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    _primed(cache, compute_s=1 * US, lookup_s=1_000 * US, insert_s=1_000 * US)
    tuning = AdmissionTuning()
    requests = [request(value) for value in range(5_000)]
    sampled = next(r for r in requests if in_sample(r.inputs, _never, tuning))
    outside = next(r for r in requests if not in_sample(r.inputs, _never, tuning))
    model = Model()
    first = await ask(cache, sampled, model)
    second = await ask(cache, sampled, model)
    assert (first[1], second[1]) == (CacheStatus.MISS, CacheStatus.HIT_LOCAL)
    assert {(await ask(cache, outside, model))[1] for _ in range(2)} == {CacheStatus.BYPASS}


def _never() -> CacheKey:
    raise AssertionError("a small input is sampled without its key")


def test_the_content_sample_is_one_in_256_and_the_same_for_the_same_inputs() -> None:
    tuning = AdmissionTuning()
    requests = [request(value) for value in range(20_000)]
    chosen = [in_sample(r.inputs, _never, tuning) for r in requests]
    assert 20_000 / 256 * 0.7 < sum(chosen) < 20_000 / 256 * 1.3
    assert chosen == [in_sample(r.inputs, _never, tuning) for r in requests]


def test_large_inputs_are_sampled_by_their_key() -> None:
    large = Tensor.from_numpy("INPUT0", np.zeros(2048, dtype=np.float32))  # 8 KiB
    tuning = AdmissionTuning()
    assert in_sample([large], lambda: key(0), tuning)
    assert not in_sample([large], lambda: key(200), tuning)


def test_the_settings_choose_the_mode_and_the_tiers() -> None:
    assert build_admission(settings("tiered", "redis://127.0.0.1:1")).tiers == ("local", "redis")
    policy = build_admission(settings("redis", "redis://127.0.0.1:1", admission="always"))
    assert (policy.mode, policy.tiers) == ("always", ("redis",))
