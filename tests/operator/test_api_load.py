"""The operator's load on the API server and its periodic passes, bounded: figures passes run a
few services at a time and leave a failing Redis alone for a while, busy caches' figures are
written once per interval, the figures pass reads no Secret, failed reconciles back off.

Counted on the emulator's request log, with a real Redis, and a socket that never answers for
an unreachable Redis. ``python -m harness.operator_scale`` measures the same at scale.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, must, service

from cachefleet.operator.handlers import retry_delay_s
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.periodic import Periodic
from cachefleet.operator.reconcile.reconciler import Reconciler
from cachefleet.operator.reconcile.settings import OperatorSettings

pytest_plugins = ("support.kube.fixtures",)  # cluster, api
pytestmark = pytest.mark.timeout(120)

NO_AUTH = {"redis": {"auth": {"enabled": False}}}


def periodic(**settings: Any) -> Periodic:
    import kubernetes

    kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return Periodic(Reconciler(Kube(), OperatorSettings(**settings)), KeyedLocks())


@pytest.fixture
def unreachable() -> Iterator[str]:
    """host:port of a Redis that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_failed_reconciles_back_off_to_a_bound_and_the_resync_is_a_safety_net() -> None:
    assert [retry_delay_s(n) for n in range(7)] == [15, 30, 60, 120, 240, 480, 600]
    assert retry_delay_s(100) == 600
    settings = OperatorSettings.from_environ({})
    assert settings.resync_interval_s == 300  # the watches restore drift at once
    assert settings.cache_figures_write_interval_s == 300
    assert settings.periodic_workers == 4


async def test_unreachable_redis_costs_one_timeout_per_worker_then_is_left_alone(
    cluster: Cluster, api: Api, unreachable: str
) -> None:
    count, timeout_s = 8, 0.5
    for index in range(count):
        await api.send("POST", CIS_PATH, service(f"svc-{index}", cache=NO_AUTH))
    bodies = [must(cis(cluster, f"svc-{index}")) for index in range(count)]
    passes = periodic(redis_address=unreachable, redis_timeout_s=timeout_s, periodic_workers=4)

    began = time.monotonic()
    await passes.run_pass(passes.refresh_figures, bodies)
    first = time.monotonic() - began
    # Serially this pass takes count * timeout (4 s); four at a time, two timeouts.
    assert first < count * timeout_s * 0.6
    began = time.monotonic()
    await passes.run_pass(passes.refresh_figures, bodies)
    assert time.monotonic() - began < timeout_s  # every failed Redis is skipped this pass


async def test_busy_cache_figures_are_written_once_per_write_interval(
    cluster: Cluster, api: Api, make_redis: Callable[..., Any]
) -> None:
    redis = make_redis()
    await api.send("POST", CIS_PATH, service("svc", cache=NO_AUTH))
    passes = periodic(redis_address=f"127.0.0.1:{redis.port}", redis_timeout_s=1.0)
    path = f"{CIS_PATH}/svc/status"

    def status_writes() -> int:
        return sum(1 for request in cluster["patch"] if request.url.path == path)

    await asyncio.to_thread(passes.refresh_figures, must(cis(cluster, "svc")))
    assert status_writes() == 1  # the first figures are written at once
    for size in (10_000, 100_000, 1_000_000):  # traffic: the figures change on every pass
        redis.client().set("key", b"x" * size)
        await asyncio.to_thread(passes.refresh_figures, must(cis(cluster, "svc")))
    assert status_writes() == 1  # the next write waits for the write interval


async def test_the_figures_pass_reads_no_secret_after_a_reconcile(
    cluster: Cluster, api: Api, unreachable: str
) -> None:
    await api.send("POST", CIS_PATH, service("svc"))  # auth on: a generated password
    passes = periodic(redis_address=unreachable, redis_timeout_s=0.2)
    await asyncio.to_thread(passes.resync, must(cis(cluster, "svc")))
    secret = f"/api/v1/namespaces/{NS}/secrets/svc-redis-auth"

    def secret_reads() -> int:
        return sum(1 for request in cluster["get"] if request.url.path == secret)

    before = secret_reads()
    await asyncio.to_thread(passes.refresh_figures, must(cis(cluster, "svc")))
    assert secret_reads() == before


def test_a_failing_redis_is_skipped_for_growing_jittered_spans() -> None:
    from cachefleet.operator.reconcile.periodic import Backoff

    backoff = Backoff(most=16)
    for failures, base in enumerate([1, 2, 4, 8, 16, 16], start=1):
        passes = backoff.failed("ml/svc")
        assert base <= passes <= 2 * base, failures
        skipped = 0
        while backoff.skip("ml/svc"):
            skipped += 1
        assert skipped == passes
    backoff.succeeded("ml/svc")
    assert not backoff.skip("ml/svc")
