"""Identical requests that share a computation get only what their own parameters would give
them, through the real server: a leader's queue timeout is not its followers' error, and a
low-priority leader does not hold followers of the default level at its place in the queue.

``timeout`` and ``priority`` are not in the cache key (they never change the answer), so the
requests below are identical to the cache; before, every follower joined the first one's
computation and took its timeout error or waited at its level. The ``picker`` model
(``support.batching``) waits in its batch queue until three rows are there, so the order of
events is set by the requests (the server's pending and coalesced counts say when each has
arrived), not by time. The leader's timeout is the one clock: nothing here passes by it
(the followers are answered once the test completes their batch, whenever it runs out), and it
is long enough for every follower to have joined the leader before it runs out on the code
that let them (so that this test fails there).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.batching import (
    TABLE,
    InFlight,
    metric,
    pick_body,
    picker_config,
    wait_for_three,
    wait_pending,
    write_picker,
)
from support.processes import ServerProcess
from support.waiting import wait_for

#: A request may set its own queue timeout.
OVERRIDE = "picker_override"
#: Two priority levels; a request that names none is at level 1, served first.
LEVELS = "picker_levels"
FOLLOWERS = 24
#: The leader's own queue timeout: every follower has arrived long before it runs out.
LEADER_TIMEOUT_US = 10_000_000
COALESCED = "cachefleet_cache_coalesced_total"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("shared-outcomes") / "repo"
    cached = "response_cache { enable: true }"
    override = wait_for_three("default_queue_policy { allow_timeout_override: true }")
    write_picker(root, OVERRIDE, picker_config(OVERRIDE, batching=override, extra=cached))
    levels = wait_for_three("priority_levels: 2 default_priority_level: 1")
    write_picker(root, LEVELS, picker_config(LEVELS, batching=levels, extra=cached))
    return root


def _body(index: int, **parameters: Any) -> dict[str, Any]:
    body = pick_body(index)
    if parameters:
        body["parameters"] = parameters
    return body


def _wait_coalesced(server: ServerProcess, model: str, count: int) -> None:
    def joined() -> bool:
        return metric(server, COALESCED, model) >= count

    wait_for(joined, f"{count} request(s) of {model} joining one in flight", 60)


def _outputs_without_cache(
    make_server: Callable[..., ServerProcess], repository: Path, model: str
) -> list[Any]:
    """What ``--cache none`` answers the followers' request (three of them make a batch)."""
    server = make_server("--cache", "none", repository=repository)
    asked = [InFlight(server, model, _body(0)) for _ in range(3)]
    answers = [request.wait() for request in asked]
    assert {status for status, _, _ in answers} == {200}
    outputs = [answer["outputs"] for _, _, answer in answers]
    assert all(each == outputs[0] for each in outputs)
    server.stop()
    return list(outputs[0])


def test_a_leaders_queue_timeout_is_not_its_followers_error(
    make_server: Callable[..., ServerProcess], repository: Path
) -> None:
    """The issue's reproduction: one request with a queue timeout of its own, then 24
    identical ones without: the leader alone gets "Request timeout expired"; the 24 wait on
    (as each would alone) and get the answer ``--cache none`` gives them."""
    expected = _outputs_without_cache(make_server, repository, OVERRIDE)
    server = make_server(repository=repository)
    leader = InFlight(server, OVERRIDE, _body(0, timeout=LEADER_TIMEOUT_US))
    wait_pending(server, OVERRIDE, 1)
    followers = [InFlight(server, OVERRIDE, _body(0)) for _ in range(FOLLOWERS)]
    _wait_coalesced(server, OVERRIDE, FOLLOWERS - 1)  # one of them computes for the others

    status, _, answer = leader.wait()
    assert (status, answer) == (503, {"error": "Request timeout expired"})
    wait_pending(server, OVERRIDE, 1)  # the followers' computation, still queued
    assert all(follower.result is None for follower in followers)

    company = InFlight(server, OVERRIDE, pick_body(1, 2))  # two rows: a batch of three
    answers = [follower.wait() for follower in followers]
    assert [(status, x_cache) for status, x_cache, _ in answers] == [(200, "miss")] * FOLLOWERS
    assert all(answer["outputs"] == expected for _, _, answer in answers)
    assert expected[0]["data"] == [TABLE[0]]
    assert company.wait()[0] == 200
    assert metric(server, "nv_inference_exec_count", OVERRIDE) == 1  # the 24 ran once


def test_a_low_priority_leader_does_not_demote_its_followers(
    make_server: Callable[..., ServerProcess], repository: Path
) -> None:
    """Two level-2 requests wait for a third row; 24 requests of the default level identical
    to the second are queued at their own level, as one computation: that is the third row,
    and all of them are answered. Before, they waited at the leader's place for ever."""
    server = make_server(repository=repository)
    other = InFlight(server, LEVELS, _body(1, priority=2))
    wait_pending(server, LEVELS, 1)
    leader = InFlight(server, LEVELS, _body(0, priority=2))
    wait_pending(server, LEVELS, 2)
    followers = [InFlight(server, LEVELS, _body(0)) for _ in range(FOLLOWERS)]

    answers = [follower.wait() for follower in followers]
    assert [status for status, _, _ in answers] == [200] * FOLLOWERS
    assert all(answer["outputs"][0]["data"] == [TABLE[0]] for _, _, answer in answers)
    assert [request.wait()[0] for request in (other, leader)] == [200, 200]
    assert metric(server, "nv_inference_exec_count", LEVELS) == 1
