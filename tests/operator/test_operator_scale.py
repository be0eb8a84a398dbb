"""Many objects at once: every one converges, on create and again after every spec changes.

The scale benchmark's mix and its definition of converged (``harness/operator_scale.py``:
every child the shape asks for exists, the status describes the current generation with
Stalled=False, and after the change the Deployment has the new replica count), with fewer
objects and the operator in a thread. Timings and memory are the benchmark's job, not asserted.
"""

from __future__ import annotations

import asyncio

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import Api, OperatorThreads, eventually

from harness.operator_scale import NAMESPACE, lookup, pending, services

pytest_plugins = ("support.kube.fixtures",)
pytestmark = pytest.mark.timeout(150)

COUNT = 20
PATH = f"/apis/cachefleet.io/v1alpha1/namespaces/{NAMESPACE}/cachedinferenceservices"


@pytest.mark.usefixtures("operator")
async def test_twenty_services_created_at_once_all_converge_and_reconverge_after_a_change(
    cluster: Cluster, api: Api, operator_threads: OperatorThreads
) -> None:
    cluster.forget_requests = True  # kmock matches each request against its whole log otherwise
    items = services(COUNT)
    assert {s.shape.name for s in items} == {"tiered", "local", "external+hpa"}
    get = lookup(cluster)
    await asyncio.gather(*(api.send("POST", PATH, s.body()) for s in items))
    await eventually(lambda: not pending(get, items), f"{COUNT} objects to converge", 90)

    change = {"spec": {"replicas": 3}}
    await asyncio.gather(*(api.send("PATCH", f"{PATH}/{s.name}", change, True) for s in items))
    await eventually(
        lambda: not pending(get, items, generation=2, replicas=3),
        f"{COUNT} objects to converge on the new spec",
        90,
    )
    assert operator_threads.alive
