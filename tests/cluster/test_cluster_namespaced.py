"""The chart's namespaced install on the real control plane: ``watchNamespaces`` set, a Role and
RoleBinding in each watched namespace (Secrets included) and a ClusterRole of cluster-scoped
reads only. The operator runs as the chart runs it (``--namespace`` per watched namespace) under
a token of the chart's ServiceAccount: a service in a watched namespace turns Ready, with the
fleet Secret the operator wrote there; everywhere else the server's RBAC refuses it (Secrets of
another tenant's namespace, kube-system's and Helm's release Secrets, a Deployment), and a
service in an unwatched namespace is left alone.

The session's operator (every namespace) is paused for the module, so only this one acts.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from support.cluster_operator import OperatorProcess, service_account_token
from support.plane import ROOT, Plane, until
from support.processes import RedisProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
RELEASE = "scoped"
OPERATOR_NAMESPACE = "scoped-system"
ACCOUNT = f"{RELEASE}-cachefleet-operator"
WATCHED = ("team-a", "team-b")
ELSEWHERE = "team-c"


def _helm(plane: Plane, *args: str) -> None:
    helm = str(ROOT / ".cache" / "tools" / "bin" / "helm")
    done = subprocess.run([helm, *args, "-n", OPERATOR_NAMESPACE], env=plane.env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"


@pytest.fixture(scope="module")
def scoped(
    installed: Plane,
    stand_in_redis: RedisProcess,
    session_operator_paused: None,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[OperatorProcess]:
    plane = installed
    for namespace in (*WATCHED, ELSEWHERE):
        plane.kubectl("create", "namespace", namespace)
    watch = ",".join(WATCHED)
    _helm(plane, "install", RELEASE, str(ROOT / "charts" / "cachefleet"), "--create-namespace",
          "--set", f"watchNamespaces={{{watch}}}", "--wait=false")  # fmt: skip
    flags = ["--standalone", *(f"--namespace={namespace}" for namespace in WATCHED)]
    running = OperatorProcess.start(
        plane, tmp_path_factory.mktemp("scoped"), ACCOUNT, *flags,
        namespace=OPERATOR_NAMESPACE, name="scoped-operator",
        env={"CACHEFLEET_OPERATOR_REDIS_ADDRESS": f"127.0.0.1:{stand_in_redis.port}"},
    )  # fmt: skip
    try:
        yield running
    finally:
        running.stop()
        _helm(plane, "uninstall", RELEASE)  # (the namespaces go at the module's end)


def _quickstart(plane: Plane, namespace: str) -> None:
    plane.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart.yaml"))


def test_the_namespaced_install_works_where_it_watches_and_is_refused_elsewhere(
    scoped: OperatorProcess, installed: Plane
) -> None:
    plane = installed
    _quickstart(plane, ELSEWHERE)
    _quickstart(plane, WATCHED[0])
    until(lambda: plane.condition("cis/quickstart", WATCHED[0], "Ready") == "True",
          f"quickstart Ready in {WATCHED[0]}\n{scoped.log[-3000:]}", timeout_s=240)  # fmt: skip
    fleet = plane.get("secret/quickstart-fleet", "-n", WATCHED[0], "--show-managed-fields")
    assert fleet["metadata"]["managedFields"][0]["manager"] == "cachefleet-operator"

    token = service_account_token(plane, ACCOUNT, OPERATOR_NAMESPACE)
    with plane.http(token) as api:

        def status(method: str, path: str, body: Any = None) -> int:
            return api.request(method, path, json=body).status_code

        for namespace in WATCHED:  # granted: the Role in each watched namespace
            assert status("GET", f"/api/v1/namespaces/{namespace}/secrets/quickstart-fleet") in (
                200, 404)  # fmt: skip
        # Refused by the server's RBAC everywhere else.
        refused = {
            "another namespace's Secret": ("GET", f"/api/v1/namespaces/{ELSEWHERE}/secrets"),
            "kube-system's Secrets": ("GET", "/api/v1/namespaces/kube-system/secrets"),
            "Helm's release Secrets": ("GET", f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets"),
            "every Secret": ("GET", "/api/v1/secrets"),
            "a Deployment elsewhere": ("GET", f"/apis/apps/v1/namespaces/{ELSEWHERE}/deployments"),
            "services elsewhere": ("GET", f"/apis/cachefleet.io/v1alpha1/namespaces/{ELSEWHERE}"
                                          "/cachedinferenceservices"),
        }  # fmt: skip
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "planted"}}
        assert status("POST", f"/api/v1/namespaces/{ELSEWHERE}/secrets", secret) == 403
        assert {what: status(*request) for what, request in refused.items()} == dict.fromkeys(
            refused, 403
        )
    # The service in the unwatched namespace got nothing: no status, no children.
    assert not plane.get("cis/quickstart", "-n", ELSEWHERE).get("status")
    children = ("get", "deployments,secrets", "-n", ELSEWHERE, "-o", "name", "-l",
                "app.kubernetes.io/instance=quickstart")  # fmt: skip
    assert plane.kubectl(*children).stdout.split() == []
    assert "Forbidden" not in _watch_errors(scoped.log)


def _watch_errors(log: str) -> str:
    """The operator's log lines of failed API calls (a Forbidden one would mean the chart's
    namespaced RBAC lacks a rule the operator needs where it watches)."""
    return "\n".join(line for line in log.splitlines() if "403" in line or "Forbidden" in line)


def test_the_cluster_role_of_the_namespaced_install_grants_no_secrets(
    scoped: OperatorProcess, installed: Plane
) -> None:
    role = installed.get(f"clusterrole/{RELEASE}-cachefleet-operator")
    assert not [rule for rule in role["rules"] if "secrets" in rule.get("resources", [])]
    for namespace in WATCHED:
        rules = installed.get(f"role/{RELEASE}-cachefleet-operator", "-n", namespace)["rules"]
        assert [rule for rule in rules if "secrets" in rule.get("resources", [])]
