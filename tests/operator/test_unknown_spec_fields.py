"""Spec fields this operator does not know are ignored with a warning, never a stalled service.

They come from a newer release's CRD: applied before its operator (the documented order), or
kept after a ``helm rollback`` (helm never downgrades a CRD). Known fields stay strict.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, Api, cis, condition, eventually, live, service
from support.processes import CACHEFLEET

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.spec import parse_spec, read_spec

pytest_plugins = ("support.kube.fixtures",)  # cluster, api, operator

OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
BASE: dict[str, Any] = {
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
    "cache": {"mode": "tiered"},
}
#: What a newer release's CRD could add: a top-level field, a field in a group, one deeper.
FROM_A_NEWER_RELEASE: dict[str, Any] = {
    "rollout": {"maxFleets": 2},
    "cache": {"mode": "tiered", "restrictedApis": ["cache"]},
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models", "readOnly": True}}},
}


def test_unknown_fields_are_named_and_change_nothing_that_is_built() -> None:
    read = read_spec(FROM_A_NEWER_RELEASE)
    assert read.ignored == (
        "spec.cache.restrictedApis",
        "spec.model.repository.pvc.readOnly",
        "spec.rollout",
    )
    built = build_children(read.spec, owner=OWNER, redis_password="pw", cache_secret="mac")
    known = build_children(parse_spec(BASE), owner=OWNER, redis_password="pw", cache_secret="mac")
    assert built == known


def test_known_fields_stay_strict_beside_unknown_ones() -> None:
    with pytest.raises(SpecError) as refused:
        read_spec({**FROM_A_NEWER_RELEASE, "replicas": -1, "cache": {"mode": "everywhere"}})
    assert "spec.replicas" in str(refused.value)
    assert "spec.cache.mode" in str(refused.value)
    assert "rollout" not in str(refused.value)


def test_render_warns_and_renders(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    body = service("svc", **FROM_A_NEWER_RELEASE)
    path.write_text(yaml.safe_dump(body))
    rendered = subprocess.run(
        [*CACHEFLEET, "render", str(path)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    assert (
        "spec.cache.restrictedApis, spec.model.repository.pvc.readOnly, spec.rollout"
        in rendered.stderr
    )
    kinds = {child["kind"] for child in yaml.safe_load_all(rendered.stdout)}
    assert {"Deployment", "StatefulSet"} <= kinds


@pytest.mark.usefixtures("operator")
@pytest.mark.timeout(120)
async def test_the_operator_reconciles_them_and_says_so_on_the_object(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", **FROM_A_NEWER_RELEASE))
    await eventually(lambda: live(cluster, "apps/v1/deployments", "svc"), "the Deployment")
    await eventually(lambda: condition(cis(cluster, "svc"), "Reconciling"), "a status")
    stalled = condition(cis(cluster, "svc"), "Stalled")
    assert stalled is None or stalled["status"] == "False"
    # kopf posts events from its own queue, so the event may land after the status patch.
    events = await eventually(
        lambda: [e for e in cluster.objects.values() if e.get("reason") == "UnknownFields"],
        "an UnknownFields event",
    )
    assert events[0]["type"] == "Warning"
    assert (
        "spec.cache.restrictedApis, spec.model.repository.pvc.readOnly, spec.rollout"
        in events[0]["message"]
    )
    assert events[0]["involvedObject"]["name"] == "svc"


#: A new user's typos: each field is a known one misspelt, at its own level.
TYPOS: dict[str, Any] = {
    "replcas": 2,
    "cache": {"mdoe": "local", "redis": {"maxMemory": "1Gi"}},
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models", "readOnyl": True}}},
}


def test_a_typo_is_named_with_the_field_it_is_closest_to() -> None:
    read = read_spec({**TYPOS, "somethingNew": {"x": 1}})
    assert dict(read.suggested) == {
        "spec.replcas": "spec.replicas",
        "spec.cache.mdoe": "spec.cache.mode",
        "spec.cache.redis.maxMemory": "spec.cache.redis.maxmemory",
    }
    assert read.describe_ignored() == (
        "spec.cache.mdoe (did you mean spec.cache.mode?), "
        "spec.cache.redis.maxMemory (did you mean spec.cache.redis.maxmemory?), "
        "spec.model.repository.pvc.readOnyl, "  # (no field of a PVC source is near)
        "spec.replcas (did you mean spec.replicas?), spec.somethingNew"
    )


def test_render_asks_did_you_mean_and_says_the_defaults_apply(tmp_path: Path) -> None:
    path = tmp_path / "svc.yaml"
    body = service("svc", cache={"mdoe": "local"})
    path.write_text(yaml.safe_dump(body))
    rendered = subprocess.run(
        [*CACHEFLEET, "render", str(path)], capture_output=True, text=True, check=False
    )
    assert rendered.returncode == 0, rendered.stderr
    assert "spec.cache.mdoe (did you mean spec.cache.mode?)" in rendered.stderr
    assert "the defaults apply" in rendered.stderr


@pytest.mark.usefixtures("operator")
@pytest.mark.timeout(120)
async def test_the_operators_warning_on_a_typo_asks_did_you_mean(
    cluster: Cluster, api: Api
) -> None:
    await api.send("POST", CIS_PATH, service("svc", cache={"mdoe": "local"}))
    events = await eventually(
        lambda: [e for e in cluster.objects.values() if e.get("reason") == "UnknownFields"],
        "an UnknownFields event",
    )
    assert "spec.cache.mdoe (did you mean spec.cache.mode?)" in events[0]["message"]
