"""The tiers behind one interface: flushed together (the memo in front included), each one's
figures in ``/metrics``, and the row cache going through the same admission and counters."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np
from support.cache_doubles import DEFAULT, FINGERPRINT, Model, metric, request, settings
from support.processes import RedisProcess

from cachefleet.runtime.cache.admission import AdmissionPolicy, AdmissionTuning
from cachefleet.runtime.cache.api import CacheAnswer, CacheRequest, CacheStatus, RowsCompute
from cachefleet.runtime.cache.factory import build_cache, build_memo
from cachefleet.runtime.cache.key import CacheKey
from cachefleet.runtime.cache.memo import MemoEntry, MemoKey
from cachefleet.runtime.cache.read_through import ReadThroughCache
from cachefleet.runtime.metrics import RuntimeMetrics
from cachefleet.runtime.service.row_cache import answer_by_rows
from cachefleet.runtime.tensor import Tensor


def rows_of(count: int, first: int = 0) -> list[CacheRequest]:
    """``count`` one-row requests of ``simple`` (the rows of one batched request)."""
    return [request(first + index) for index in range(count)]


async def doubled(rows: list[CacheRequest], missing: list[int]) -> list[list[Tensor]]:
    return [[Tensor.from_numpy("OUTPUT0", rows[i].inputs[0].to_numpy() * 2)] for i in missing]


async def test_a_cache_flush_empties_the_memo_in_front_with_the_other_tiers() -> None:
    """The flush endpoint calls the cache's flush only: the memo's answers of the model go
    with it, counted among what was removed."""
    local = settings("local")
    memo = build_memo(local)
    assert memo is not None
    cache = build_cache(local, RuntimeMetrics(), memo=memo)
    await cache.start()
    req, model = request(1), Model()
    await cache.get_or_compute(req, DEFAULT, model.for_request(req))
    hit = await cache.get_or_compute(req, DEFAULT, model.for_request(req))
    assert hit.status is CacheStatus.HIT_LOCAL
    assert hit.local_entry is not None
    key = MemoKey(b"d" * 16, (b"", b"request"))
    memo.insert(key, MemoEntry(b"answer", object(), hit.local_entry, "simple", "", hit.status))
    try:
        assert await cache.flush("simple") == 2, "the local entry and its memoized answer"
        assert memo.lookup(key) is None
        assert memo.figures().entries == 0
    finally:
        await cache.close()


async def test_every_tier_reports_its_figures_in_the_metrics(redis_server: RedisProcess) -> None:
    tiered = settings("tiered", redis_server.url)
    metrics = RuntimeMetrics()
    cache = build_cache(tiered, metrics, memo=build_memo(tiered))
    await cache.start()
    req, model = request(2), Model()
    try:
        for _ in range(3):  # a miss of both tiers, then two local hits
            await cache.get_or_compute(req, DEFAULT, model.for_request(req))
    finally:
        await cache.close()

    def figure(name: str, tier: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"tier": tier})

    assert figure("cachefleet_cache_tier_entries", "local") == 1
    assert figure("cachefleet_cache_tier_hits_total", "local") == 2
    assert figure("cachefleet_cache_tier_misses_total", "local") == 1
    assert figure("cachefleet_cache_tier_misses_total", "redis") == 1
    assert figure("cachefleet_cache_tier_entries", "memo") == 0
    # What a shared Redis holds is not this replica's to tell: no sample rather than a 0.
    assert figure("cachefleet_cache_tier_entries", "redis") is None


async def test_row_lookups_are_counted_in_tritons_cache_counters() -> None:
    """A batched request answered row by row counts each row as Triton counts a request: a
    dashboard of ``nv_cache_*`` sees the row cache's hits and misses."""
    metrics = RuntimeMetrics()
    cache = build_cache(settings("local"), metrics)
    assert isinstance(cache, ReadThroughCache)
    rows = rows_of(3)
    first = await cache.get_rows_or_compute(rows, lambda missing: doubled(rows, list(missing)))
    again = await cache.get_rows_or_compute(rows, lambda missing: doubled(rows, list(missing)))
    assert [status for _, status in first] == [CacheStatus.MISS] * 3
    assert [status for _, status in again] == [CacheStatus.HIT_LOCAL] * 3
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "nv_cache_num_misses_per_model", **labels) == 3
    assert metric(metrics, "nv_cache_num_hits_per_model", **labels) == 3
    assert metric(metrics, "cachefleet_cache_row_hits_total", tier="local", **labels) == 3


def local_tier_skipped() -> tuple[AdmissionPolicy, RuntimeMetrics, ReadThroughCache]:
    """A local cache whose admission skips the tier for ``simple`` (its lookups judged dearer
    than any probe budget), with the admission and the metrics it reports to."""
    admission = AdmissionPolicy("auto", ("local",))
    judged = admission.of("simple", "1").tier("local")
    judged.admitted = False
    judged.lookup_s.add(1.0)  # a lookup dearer than any probe budget
    metrics = RuntimeMetrics()
    cache = build_cache(settings("local"), metrics, admission)
    assert isinstance(cache, ReadThroughCache)
    return admission, metrics, cache


async def test_rows_skip_a_tier_that_admission_skips_for_the_model() -> None:
    """A model whose local tier costs more than it saves keeps its rows out of it too."""
    admission, _, cache = local_tier_skipped()
    model = admission.of("simple", "1")
    rows = [req for req in rows_of(64) if not model.in_sample(req.inputs, never_keyed)][:4]
    for _ in range(2):
        answered = await cache.get_rows_or_compute(
            rows, lambda missing: doubled(rows, list(missing))
        )
        assert [status for _, status in answered] == [CacheStatus.MISS] * 4
    assert np.array_equal(answered[0][0][0].to_numpy(), rows[0].inputs[0].to_numpy() * 2)
    assert cache.near[0].figures().entries == 0, "nothing kept in the skipped tier"


def batch_inputs(values: Sequence[int]) -> list[Tensor]:
    """The inputs of a batched request of ``simple`` whose rows are ``request(value)``'s."""
    data = np.concatenate([np.full((1, 16), value, dtype=np.int32) for value in values])
    return [Tensor.from_numpy("INPUT0", data)]


class Batches:
    """Batched requests of ``simple`` answered as the service answers them with the row cache:
    the whole request through the cache, its compute the row cache's (``service.row_cache``);
    counts the model's runs."""

    def __init__(self, cache: ReadThroughCache) -> None:
        self.cache = cache
        self.runs = 0

    async def ask(self, values: Sequence[int]) -> CacheAnswer:
        whole = CacheRequest(
            "simple", "1", batch_inputs(values), {}, enabled=True, ttl_s=60,
            fingerprint=FINGERPRINT,
        )  # fmt: skip

        async def run(inputs: Sequence[Tensor]) -> list[Tensor]:
            self.runs += 1
            return [Tensor.from_numpy("OUTPUT0", inputs[0].to_numpy() * 2)]

        async def compute() -> list[Tensor]:
            return (await answer_by_rows(self.cache, whole, run)).outputs

        return await self.cache.get_or_compute(whole, DEFAULT, compute)


async def test_a_batchs_rows_are_sampled_with_the_batch_not_with_its_first_row() -> None:
    """A skipped tier's content sample is drawn once, on the batched request: a batch outside
    it keeps its rows out of the tier, though its first row, asked for alone, is in it."""
    admission, metrics, cache = local_tier_skipped()
    model, batches = admission.of("simple", "1"), Batches(cache)
    first = next(
        value
        for value in range(5_000)
        if model.in_sample(request(value).inputs, never_keyed)
        and not model.in_sample(batch_inputs([value, value + 1, value + 2]), never_keyed)
    )
    answer = await batches.ask([first, first + 1, first + 2])
    assert answer.status is CacheStatus.BYPASS
    assert batches.runs == 1
    assert np.array_equal(answer.outputs[0].to_numpy()[0], np.full(16, first * 2))
    assert cache.near[0].figures().entries == 0, "no row kept in the tier the batch skipped"
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "cachefleet_cache_row_misses_total", **labels) == 0, "none looked up"


async def test_a_batch_admission_recomputes_computes_its_rows_and_earns_credit_once() -> None:
    """Admission recomputes a request now and then to refresh what a hit saves; a batched one
    is decided once, so its rows are computed too (the model runs, and the compute time
    admission measures is the model's, not row lookups'): a second decision for the rows
    would earn the recompute credit again and look them up."""
    admission = AdmissionPolicy("auto", ("local",))
    metrics = RuntimeMetrics()
    cache = build_cache(settings("local"), metrics, admission)
    assert isinstance(cache, ReadThroughCache)
    rows = rows_of(2)
    await cache.get_rows_or_compute(rows, lambda missing: doubled(rows, list(missing)))
    model = admission.of("simple", "1")
    for _ in range(AdmissionTuning().min_lookups):  # the tier measured, the model never computed
        model.tier("local").looked_up(1e-3, hit=True)
    (before,) = admission.figures("simple", "1")
    assert before.computes == 0
    batches = Batches(cache)
    answer = await batches.ask([0, 1])  # both rows held by the local tier
    assert answer.status is CacheStatus.BYPASS, "recomputed"
    assert batches.runs == 1, "its rows computed, not looked up"
    (after,) = admission.figures("simple", "1")
    assert after.computes == 1
    assert after.lookups == before.lookups, "no row looked up"
    labels = {"model": "simple", "version": "1"}
    assert metric(metrics, "cachefleet_cache_row_hits_total", tier="local", **labels) == 0


def never_keyed() -> CacheKey:
    raise AssertionError("small inputs are sampled by their bytes, never by their key")


async def test_a_cancelled_batch_hands_its_rows_to_the_batches_waiting_on_them() -> None:
    """Single-flight per row: a batch waits for the rows another is computing and computes only
    its own; when the leading batch goes away (its client hung up), the follower computes the
    rows it waited for itself, once, and answers them."""
    cache = build_cache(settings("local"), RuntimeMetrics())
    assert isinstance(cache, ReadThroughCache)
    calls: list[list[int]] = []
    arrived: asyncio.Queue[None] = asyncio.Queue()
    gate = asyncio.Event()

    def computing(rows: list[CacheRequest], stuck: bool) -> RowsCompute:
        async def compute(missing: Sequence[int]) -> list[list[Tensor]]:
            calls.append([rows[i].inputs[0].to_numpy().item(0) for i in missing])
            arrived.put_nowait(None)
            if stuck:
                await gate.wait()
            return await doubled(rows, list(missing))

        return compute

    leading, following = rows_of(2), rows_of(3)
    leader = asyncio.create_task(cache.get_rows_or_compute(leading, computing(leading, True)))
    await asyncio.wait_for(arrived.get(), 30)
    follower = asyncio.create_task(
        cache.get_rows_or_compute(following, computing(following, False))
    )
    await asyncio.wait_for(arrived.get(), 30)  # the follower computes row 2 only
    leader.cancel()
    answered = await asyncio.wait_for(follower, 30)
    first = [row.inputs[0].to_numpy().item(0) for row in following]
    assert calls == [first[:2], first[2:], first[:2]], "only row 2, then the abandoned rows"
    assert [status for _, status in answered] == [CacheStatus.MISS] * 3
    for (outputs, _), row in zip(answered, following, strict=True):
        assert np.array_equal(outputs[0].to_numpy(), row.inputs[0].to_numpy() * 2)
