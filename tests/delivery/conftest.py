"""Fixtures for the delivery checks: the real helm binary, and the chart rendered once a session."""

from __future__ import annotations

from pathlib import Path

import pytest

from delivery.support import HERE, Helm, Manifest, require_tool


@pytest.fixture(scope="session")
def helm() -> Helm:
    return Helm(require_tool("helm", "run scripts/get-helm"))


@pytest.fixture(scope="session")
def custom_values() -> Path:
    """Non-default values: watched namespaces, ServiceMonitor and dashboard on, own resources."""
    return HERE / "values-custom.yaml"


@pytest.fixture(scope="session")
def default_objects(helm: Helm) -> list[Manifest]:
    return helm.template()


@pytest.fixture(scope="session")
def custom_objects(helm: Helm, custom_values: Path) -> list[Manifest]:
    return helm.template(custom_values)
