"""Upgrades: what an operator upgrade does to services that already run.

An API server stores a CRD default once, at create, so a defaulted image would pin every existing
service to the release that created it; the runtime refuses settings it does not know, so an
operator that renders every setting breaks pods of an older image. These check the rendered
objects and the CRD themselves, not what the emulator accepts.
"""

from __future__ import annotations

import argparse
import copy
import importlib.metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube.crd_schema import EXAMPLES, apply_defaults, schema

from cachefleet.operator.manifests.children import build_children
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.release import RELEASE_RUNTIME_IMAGE, VERSION
from cachefleet.operator.manifests.runtime import runtime_settings
from cachefleet.operator.manifests.spec import ServiceSpec, parse_spec
from cachefleet.runtime.config import RuntimeSettings, load_settings

ROOT = Path(__file__).resolve().parents[2]
OWNER = Owner("svc", "ml", "0b7c7a5e-1b8d-4a57-9f43-5c0f5d1e9a11")
BASE: dict[str, Any] = {
    "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
}


def example_specs() -> list[tuple[str, ServiceSpec]]:
    """Every example as the API server stores it (the CRD's defaults applied) and parses it."""
    specs = []
    for path in EXAMPLES:
        body = yaml.safe_load(path.read_text())
        stored = apply_defaults(schema(), body)
        specs.append((path.name, parse_spec(stored["spec"])))
    return specs


def config_of(children: list[dict[str, Any]]) -> str:
    [configmap] = [c for c in children if c["kind"] == "ConfigMap" and "config.yaml" in c["data"]]
    return str(configmap["data"]["config.yaml"])


def server_image(children: list[dict[str, Any]]) -> str:
    [deployment] = [c for c in children if c["kind"] == "Deployment"]
    [server] = deployment["spec"]["template"]["spec"]["containers"]
    return str(server["image"])


def test_the_crd_stores_no_runtime_image() -> None:
    runtime = schema()["properties"]["spec"]["properties"]["runtime"]
    assert "default" not in runtime["properties"]["image"]
    stored = apply_defaults(schema(), {"spec": copy.deepcopy(BASE)})
    assert "image" not in stored["spec"]["runtime"]


def test_a_service_without_an_image_runs_the_runtime_of_the_operators_release() -> None:
    spec = parse_spec(BASE)
    assert server_image(
        build_children(spec, owner=OWNER, redis_password="pw", cache_secret="mac")
    ) == (RELEASE_RUNTIME_IMAGE)
    mirrored = build_children(
        spec,
        owner=OWNER,
        redis_password="pw",
        cache_secret="mac",
        runtime_image="mirror.example/cachefleet:0.1.0",
    )
    assert server_image(mirrored) == "mirror.example/cachefleet:0.1.0"
    pinned = parse_spec({**BASE, "runtime": {"image": "runtime:dev"}})
    assert (
        server_image(build_children(pinned, owner=OWNER, redis_password="pw", cache_secret="mac"))
        == "runtime:dev"
    )


def test_the_release_image_is_tagged_with_the_distribution_and_chart_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "cachefleet" / "Chart.yaml").read_text())
    assert VERSION == importlib.metadata.version("cachefleet") == chart["appVersion"]
    assert RELEASE_RUNTIME_IMAGE.endswith(f":{VERSION}")


@pytest.mark.parametrize(("name", "spec"), example_specs(), ids=[n for n, _ in example_specs()])
def test_the_config_holds_only_settings_that_differ_from_the_runtimes_defaults(
    name: str, spec: ServiceSpec
) -> None:
    document = yaml.safe_load(
        config_of(build_children(spec, owner=OWNER, redis_password="pw", cache_secret="mac"))
    )
    defaults = RuntimeSettings()
    for group, fields in document.items():
        default_group = getattr(defaults, group)
        for field, value in fields.items():
            default = type(default_group).model_fields[field].default
            assert value != default, f"{group}.{field}"
            assert str(value) != str(default), f"{group}.{field}"


@pytest.mark.parametrize(("name", "spec"), example_specs(), ids=[n for n, _ in example_specs()])
def test_a_rendered_config_is_read_back_by_the_runtime_as_the_operator_meant(
    name: str, spec: ServiceSpec, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        config_of(build_children(spec, owner=OWNER, redis_password="pw", cache_secret="mac"))
    )
    loaded = load_settings(argparse.Namespace(config=path), environ={})
    assert loaded == runtime_settings(spec, owner=OWNER)


# Whether pods of the previous release accept what this operator renders is checked against that
# release's own code, not a model of it: tests/skew/test_runtime_skew.py (bash scripts/test-skew).
