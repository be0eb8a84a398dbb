"""Files generated from one source each stay equal to what their script makes from it now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import kubernetes_validate

from delivery.support import CHART, NAMESPACE, REPO, TOOLS, Helm, load_all


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    """Run a repository script with the tool cache and this Python's folder first on PATH."""
    path = os.pathsep.join([str(TOOLS), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path}
    return subprocess.run(
        list(args), cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=120
    )


def test_chart_crds_are_the_top_level_crds_byte_for_byte() -> None:
    top = {p.name: p.read_bytes() for p in (REPO / "crds").glob("*.yaml")}
    chart = {p.name: p.read_bytes() for p in (CHART / "crds").glob("*.yaml")}
    assert top
    assert chart == top


def test_chart_rbac_rules_are_the_operator_rules_byte_for_byte() -> None:
    synced = (CHART / "files" / "operator-rbac.yaml").read_bytes()
    assert synced == (REPO / "operator" / "rbac.yaml").read_bytes()


def test_deploy_is_what_the_chart_renders_now(helm: Helm) -> None:
    result = run_script("bash", "scripts/render-deploy", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_deploy_is_a_complete_namespaced_install() -> None:
    files = sorted((REPO / "deploy").glob("*.yaml"))
    objects = [obj for path in files for obj in load_all(path.read_text())]
    kinds = [obj["kind"] for obj in objects]
    # kubectl applies a file top to bottom: the Namespace must come before what lives in it.
    assert kinds[0] == "Namespace"
    assert sorted(kinds) == sorted(
        ["Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"]
    )
    assert objects[0]["metadata"]["name"] == NAMESPACE
    for obj in objects:
        kubernetes_validate.validate(obj, "1.35", strict=True)
        if obj["kind"] in {"ServiceAccount", "Deployment"}:
            assert obj["metadata"]["namespace"] == NAMESPACE


def test_reference_pages_are_what_the_code_gives_now() -> None:
    """docs/reference/ (flags, the CRD, metrics, Helm values) is generated: never stale."""
    result = run_script(sys.executable, "scripts/render-docs", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
