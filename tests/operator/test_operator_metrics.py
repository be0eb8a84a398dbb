"""The operator's own metrics, scraped from `cachefleet operator --metrics-port` as Prometheus
would: reconciles by trigger and result, its API requests by verb and code, leadership, and the
services that are not Ready with their reason."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, eventually, live, service
from support.kube.operator_process import operator_process

from cachefleet.operator.reconcile.metrics import OperatorMetrics

pytest_plugins = ("support.kube.fixtures",)  # cluster, api

pytestmark = pytest.mark.timeout(180)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


async def test_the_operator_exports_what_it_does_on_its_metrics_port(
    cluster: Cluster, api: Api, tmp_path: Path
) -> None:
    from support.processes import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"

    async def scrape() -> Samples:
        try:
            async with aiohttp.ClientSession() as session, session.get(url) as response:
                assert response.status == 200
                return samples(await response.text())
        except aiohttp.ClientConnectionError:
            return {}

    async with operator_process(tmp_path / "operator.log", f"--metrics-port={port}"):
        await api.send("POST", CIS_PATH, service("svc", cache={"mode": "local"}))
        await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
        found: Samples = {}

        async def reconciled() -> bool:
            found.update(await scrape())
            return value(found, "cachefleet_operator_reconciles_total",
                         trigger="create", result="ok") >= 1  # fmt: skip

        deadline = asyncio.get_running_loop().time() + 90
        while not await reconciled():
            assert asyncio.get_running_loop().time() < deadline, "no reconcile counted"
            await asyncio.sleep(0.2)

    assert value(found, "cachefleet_operator_leader") == 1
    assert value(found, "cachefleet_operator_reconcile_seconds_count", trigger="create") >= 1
    # Every child was applied, and the server's answers are counted by verb and code.
    applies = value(found, "cachefleet_operator_kube_requests_total", verb="apply", code="200")
    assert applies >= 3
    # The emulator runs no pods: the new service is not Ready, and says why.
    not_ready = {
        dict(labels)["reason"]
        for (name, labels), figure in found.items()
        if name == "cachefleet_operator_service_not_ready"
        and dict(labels)["namespace"] == NS
        and dict(labels)["service"] == "svc"
        and figure == 1
    }
    assert not_ready == {"Progressing"}


def test_a_failed_request_is_counted_by_its_code_and_an_unanswered_one_as_none() -> None:
    metrics = OperatorMetrics()
    metrics.request("GET", "application/json", False, 404)
    metrics.request("GET", "application/json", True, 200)
    metrics.request("PATCH", "application/merge-patch+json", False, 0)
    name = "cachefleet_operator_kube_requests_total"

    def count(**labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert count(verb="get", code="404") == 1
    assert count(verb="list", code="200") == 1
    assert count(verb="patch", code="none") == 1


async def test_a_periodic_pass_is_timed_and_forgets_services_that_are_gone() -> None:
    from cachefleet.operator.reconcile.kube import Kube
    from cachefleet.operator.reconcile.locks import KeyedLocks
    from cachefleet.operator.reconcile.periodic import Periodic
    from cachefleet.operator.reconcile.reconciler import Reconciler
    from cachefleet.operator.reconcile.reporting import Reporter
    from cachefleet.operator.reconcile.settings import OperatorSettings

    metrics = OperatorMetrics()
    metrics.readiness.observe(NS, "kept", False, "Progressing")
    metrics.readiness.observe(NS, "deleted", False, "ModelDownloadFailed")
    reconciler = Reconciler(Kube(), OperatorSettings())
    periodic = Periodic(reconciler, KeyedLocks(), reporter=Reporter(metrics))
    pending_seen: list[float | None] = []

    def resync(body: Mapping[str, Any]) -> None:
        pending_seen.append(metrics.registry.get_sample_value(
            "cachefleet_operator_periodic_pending", {"pass": "resync"}))  # fmt: skip

    bodies = [{"metadata": {"namespace": NS, "name": name}} for name in ("kept", "new")]
    await periodic.run_pass(resync, bodies)

    def sample(name: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, labels)

    assert sorted(v or 0 for v in pending_seen)[-1] == 2  # the whole pass was pending at first
    assert sample("cachefleet_operator_periodic_pending", **{"pass": "resync"}) == 0
    assert (sample("cachefleet_operator_periodic_last_pass_timestamp_seconds",
                   **{"pass": "resync"}) or 0) > 0  # fmt: skip
    not_ready = "cachefleet_operator_service_not_ready"
    assert sample(not_ready, namespace=NS, service="kept", reason="Progressing") == 1
    assert sample(not_ready, namespace=NS, service="deleted", reason="ModelDownloadFailed") is None
