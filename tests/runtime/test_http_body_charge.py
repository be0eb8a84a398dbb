"""An HTTP request's share of the budget: what it holds. The first step of its body when it
enters, then the bytes received and a step ahead as they arrive, its inflated bytes as they
inflate, and its decode once the body is whole (before the decode); a body that could never be
decoded within the whole budget is a 413."""

from __future__ import annotations

import asyncio

import pytest

from cachefleet.runtime.errors import OverloadedError, PayloadTooLargeError
from cachefleet.runtime.http.body_charge import STEP, BodyCharge
from cachefleet.runtime.service.request_budget import RequestBudget, body_cost

MIB = 1 << 20


def test_a_small_body_is_charged_once_as_before() -> None:
    budget = RequestBudget(10, 64 * MIB)
    charge = BodyCharge(budget, 1000, 64 * MIB, None, compressed=False)
    assert charge.opening_cost() == 1000
    assert charge.covered == 1000


def test_a_large_declared_body_enters_with_one_step() -> None:
    budget = RequestBudget(10, 64 * MIB)
    charge = BodyCharge(budget, 3 * MIB, 64 * MIB, 100, compressed=False)
    assert charge.opening_cost() == STEP


def test_a_chunked_body_enters_with_one_step_not_the_limit() -> None:
    budget = RequestBudget(10, 64 * MIB)
    charge = BodyCharge(budget, None, 64 * MIB, None, compressed=False)
    assert charge.opening_cost() == STEP


def test_a_declared_body_that_could_never_fit_is_refused() -> None:
    budget = RequestBudget(10, 34 * MIB)
    with pytest.raises(PayloadTooLargeError, match="max-inflight-bytes"):
        BodyCharge(budget, 4 * MIB, 64 * MIB, None, compressed=False).opening_cost()
    # The same length fits as binary data (its cost is twice the body, not seventeen times).
    BodyCharge(budget, 4 * MIB, 64 * MIB, 100, compressed=False).opening_cost()


def test_the_charge_grows_with_the_bytes_received() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 64 * MIB)
        charge = BodyCharge(budget, None, 64 * MIB, 0, compressed=False)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        await charge.cover(STEP + 1)
        assert charge.covered == 2 * STEP + 1
        assert budget.bytes == charge.taken == 2 * STEP + 1

    asyncio.run(scenario())


def test_a_chunked_body_past_the_whole_budget_is_refused() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 2 * MIB)
        charge = BodyCharge(budget, None, 64 * MIB, 0, compressed=False)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        with pytest.raises(PayloadTooLargeError, match="max-inflight-bytes"):
            await charge.cover(MIB + 1)

    asyncio.run(scenario())


def test_growing_waits_for_room_then_is_overloaded() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 4 * MIB, wait_s=0.1)
        assert budget.try_enter(7 * MIB // 2)  # another request holds most of the budget
        charge = BodyCharge(budget, None, 64 * MIB, 0, compressed=False)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        with pytest.raises(OverloadedError):
            await charge.cover(2 * STEP)
        assert budget.bytes == 7 * MIB // 2 + charge.taken

    asyncio.run(scenario())


def test_a_compressed_body_pays_for_its_inflated_bytes() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 64 * MIB)
        charge = BodyCharge(budget, 1000, 64 * MIB, None, compressed=True)
        cost = charge.opening_cost()
        assert cost == 1000  # the compressed bytes, nothing inflated yet
        assert budget.try_enter(cost)
        charge.taken = cost
        await charge.cover_inflated(MIB)
        assert budget.bytes == 1000 + MIB  # inflated bytes as they are made
        await charge.decoding(MIB)
        assert budget.bytes == 1000 + body_cost(MIB, None)  # and their decode before it starts

    asyncio.run(scenario())


def test_a_slow_json_body_holds_what_it_sent_and_a_step_not_its_decode() -> None:
    """A JSON body that declared 3 MiB and sent 112 bytes holds one step of bytes (it once held
    seventeen: the step charged at the decode's factor, and 17 such bodies overfilled 64 MiB)."""

    async def scenario() -> None:
        budget = RequestBudget(100, 64 * MIB, wait_s=0.1)
        for _ in range(17):
            charge = BodyCharge(budget, 3 * MIB, 64 * MIB, None, compressed=False)
            cost = charge.opening_cost()
            assert budget.try_enter(cost)
            charge.taken = cost
            await charge.cover(112)
        assert budget.bytes == 17 * (112 + STEP)

    asyncio.run(scenario())


def test_the_decode_is_paid_for_before_it_starts_at_the_body_s_real_size() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 64 * MIB)
        charge = BodyCharge(budget, 3 * MIB, 64 * MIB, None, compressed=False)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        await charge.cover(3 * MIB)
        assert budget.bytes == 3 * MIB
        await charge.decoding(3 * MIB)
        assert budget.bytes == charge.taken == body_cost(3 * MIB, None)

    asyncio.run(scenario())


def test_a_decode_without_room_waits_then_is_overloaded() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 20 * MIB, wait_s=0.1)
        charge = BodyCharge(budget, MIB, 64 * MIB, None, compressed=False)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        await charge.cover(MIB)
        assert budget.try_enter(4 * MIB)  # another request: 17 MiB of decode no longer fit
        with pytest.raises(OverloadedError):
            await charge.decoding(MIB)

    asyncio.run(scenario())


def test_inflated_bytes_that_could_never_be_decoded_are_refused_as_they_inflate() -> None:
    async def scenario() -> None:
        budget = RequestBudget(10, 16 * MIB)
        charge = BodyCharge(budget, 1000, 64 * MIB, None, compressed=True)
        cost = charge.opening_cost()
        assert budget.try_enter(cost)
        charge.taken = cost
        with pytest.raises(PayloadTooLargeError, match="max-inflight-bytes"):
            await charge.cover_inflated(MIB)  # 17 MiB of JSON decode: never fits 16 MiB

    asyncio.run(scenario())
