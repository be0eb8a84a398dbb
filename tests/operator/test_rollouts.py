"""The pacing of rollouts decided from the live Deployments: what counts as rolling, and the gap
between an apply and the watch event that shows it."""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION
from cachefleet.operator.reconcile.rollouts import RolloutGate, rolling, with_live_template


def deployment(
    name: str, template: str = "old", *, generation: int = 1, observed: int = 1, ready: int = 2
) -> dict[str, Any]:
    """A live runtime Deployment of 2 replicas, ``ready`` of them updated and available."""
    return {
        "metadata": {"namespace": "ml", "name": name, "generation": generation,
                     "annotations": {TEMPLATE_HASH_ANNOTATION: template}},
        "spec": {"replicas": 2, "template": {"metadata": {"creationTimestamp": None},
                                             "spec": {"containers": [{"image": template}]}}},
        "status": {"observedGeneration": observed, "replicas": 2, "updatedReplicas": ready,
                   "readyReplicas": ready, "availableReplicas": ready},
    }  # fmt: skip


def test_what_counts_as_mid_rollout() -> None:
    assert not rolling(deployment("a"))
    assert rolling(deployment("a", ready=1))
    assert rolling(deployment("a", generation=2, observed=1))  # the controller has not looked yet
    stuck = deployment("a", ready=1)
    stuck["status"]["conditions"] = [{"type": "Progressing", "status": "False",
                                      "reason": "ProgressDeadlineExceeded"}]  # fmt: skip
    assert not rolling(stuck)  # Stalled: it holds no place


def test_a_fleet_admitted_but_not_yet_seen_holds_its_place() -> None:
    live = {name: deployment(name) for name in ("a", "b")}
    gate = RolloutGate(1, lambda: list(live.values()))
    with gate.admit(("ml", "a"), deployment("a", "new")) as decision:
        assert decision.proceed
        gate.applied(("ml", "a"), deployment("a", "new", generation=2, observed=1))
    # The watch has not shown a's new generation yet: b must still wait.
    with gate.admit(("ml", "b"), deployment("b", "new")) as decision:
        assert not decision.proceed
        assert "ml/a" in decision.message
    live["a"] = deployment("a", "new", generation=2, observed=2, ready=1)  # seen, rolling
    with gate.admit(("ml", "b"), deployment("b", "new")) as decision:
        assert not decision.proceed
    live["a"] = deployment("a", "new", generation=2, observed=2)  # done
    with gate.admit(("ml", "b"), deployment("b", "new")) as decision:
        assert decision.proceed


def test_no_change_and_a_new_fleet_are_never_queued() -> None:
    live = [deployment("a", "new", ready=0), deployment("b")]
    gate = RolloutGate(1, lambda: live)
    with gate.admit(("ml", "b"), deployment("b")) as decision:  # its pods stay as they are
        assert decision.proceed
    with gate.admit(("ml", "c"), deployment("c", "new")) as decision:  # no live Deployment
        assert decision.proceed


def test_a_queued_fleet_keeps_its_live_template_and_gets_the_rest() -> None:
    desired = deployment("a", "new")
    desired["spec"]["replicas"] = 5
    kept = with_live_template(desired, deployment("a", "old"))
    assert kept["spec"]["template"]["spec"]["containers"][0]["image"] == "old"
    assert "creationTimestamp" not in kept["spec"]["template"]["metadata"]
    assert kept["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] == "old"
    assert kept["spec"]["replicas"] == 5


def test_a_fleet_whose_pods_stay_is_decided_without_reading_every_fleet() -> None:
    """A resync asks the gate for every fleet: reading every fleet's Deployment for each made
    a pass quadratic in the fleets. Only a fleet whose pods would change reads them all."""
    live = {name: deployment(name) for name in ("a", "b")}
    reads: list[int] = []

    def every() -> list[dict[str, Any]]:
        reads.append(1)
        return list(live.values())

    gate = RolloutGate(1, every, lambda fleet: live.get(fleet[1]))
    with gate.admit(("ml", "a"), deployment("a")) as decision:  # no change to its pods
        assert decision.proceed
    with gate.admit(("ml", "c"), deployment("c", "new")) as decision:  # a new fleet
        assert decision.proceed
    assert reads == []
    with gate.admit(("ml", "a"), deployment("a", "new")) as decision:  # its pods change
        assert decision.proceed
    assert reads == [1]
