"""The Grafana dashboard the chart ships queries only metrics the runtime really exports."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from cachefleet.runtime.metrics import RuntimeMetrics
from delivery.support import RELEASE, Manifest, only

#: What the dashboard must show (design: hit ratio per tier, lookup latency, circuit breaker,
#: local bytes, insert drops), as the series names Prometheus stores.
REQUIRED = {
    "cachefleet_cache_hits_total",
    "cachefleet_cache_misses_total",
    "cachefleet_cache_lookup_seconds_bucket",
    "cachefleet_redis_circuit_open",
    "cachefleet_cache_local_bytes",
    "cachefleet_cache_insert_dropped_total",
}
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported_series() -> set[str]:
    """Every series name the runtime's registry can expose, from its metric families."""
    names: set[str] = set()
    for family in RuntimeMetrics().registry.collect():
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ("",)))
    return names


@pytest.fixture(scope="module")
def dashboard(custom_objects: list[Manifest]) -> dict[str, Any]:
    config_map = only(custom_objects, "ConfigMap", f"{RELEASE}-dashboard")
    parsed: dict[str, Any] = json.loads(config_map["data"]["cachefleet-cache.json"])
    return parsed


def queries(dashboard: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_dashboard_shows_every_cache_signal(dashboard: dict[str, Any]) -> None:
    used = {name for expr in queries(dashboard) for name in re.findall(r"cachefleet_\w+", expr)}
    assert used >= REQUIRED
    assert used <= exported_series(), used - exported_series()


def test_hit_ratio_is_broken_down_per_tier(dashboard: dict[str, Any]) -> None:
    per_tier = [e for e in queries(dashboard) if "by (tier)" in e and "hits_total" in e]
    assert per_tier
    assert all("misses_total" in e for e in per_tier)  # a ratio of all lookups, not a rate


def test_every_panel_uses_the_selectable_data_source(dashboard: dict[str, Any]) -> None:
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace"} <= variables
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
        assert all('namespace=~"$namespace"' in t["expr"] for t in panel["targets"])
