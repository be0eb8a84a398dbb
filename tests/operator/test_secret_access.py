"""What the operator may do with Secrets, and that it does no more.

RBAC cannot grant by label, so any list or watch of Secrets (even label-selected, even only the
operator's own) needs list and watch on every Secret of the cluster in the default install:
kube-system's, and Helm's release Secrets. The operator reads Secrets by name only, writes its
generated ones by server-side apply and leaves their deletion to the garbage collector.

Here the operator (kopf, real HTTP) runs against the emulator through the paths that touch
Secrets (a generated password and fleet Secret, a user's Secret by ``passwordSecretRef``, a
switch to ``mode: local``, a lost generated Secret recreated by the resync), and every request it
made is checked against the rules the chart grants (``operator/rbac.yaml``).
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, eventually, live, must, service

pytest_plugins = ("support.kube.fixtures",)  # cluster, start_operator
pytestmark = pytest.mark.timeout(120)

RULES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "operator" / "rbac.yaml").read_text()
)
#: The test's own requests carry this, so that only the operator's are checked.
TEST_AGENT = "cachefleet-test-kubectl"
SECRETS_PATH = f"/api/v1/namespaces/{NS}/secrets"


def attributes(method: str, path: str, params: Any) -> tuple[str, str, str] | None:
    """(API group, resource[/subresource], verb) of a resource request, as the API server's
    authorizer sees it; None for discovery and other non-resource paths."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]  # a namespaced resource (a namespace itself is /namespaces/<name>)
    resource, named = rest[0], len(rest) >= 2
    if len(rest) >= 3:
        resource = f"{resource}/{rest[2]}"
    if method == "GET":
        verb = "get" if named else ("watch" if params.get("watch") in ("true", "1") else "list")
    else:
        verbs = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}
        verb = verbs[method] if named or method == "POST" else "deletecollection"
    return group, resource, verb


def granted(group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in RULES
    )


@pytest.fixture
async def kubectl(cluster: Cluster) -> AsyncIterator[Api]:
    headers = {"User-Agent": TEST_AGENT}
    async with aiohttp.ClientSession(base_url=str(cluster.url), headers=headers) as session:
        yield Api(session)


def test_no_rule_lists_watches_or_deletes_secrets() -> None:
    verbs = {v for rule in RULES if "secrets" in rule["resources"] for v in rule["verbs"]}
    assert verbs == {"get", "create", "patch"}


async def test_every_request_the_operator_makes_is_granted_and_none_lists_secrets(
    cluster: Cluster,
    kubectl: Api,
    start_operator: Callable[[], Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "1")
    await start_operator()
    password = base64.b64encode(b"from-the-user").decode()
    user_secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "redis-pw"},
                   "data": {"password": password}}  # fmt: skip
    await kubectl.send("POST", SECRETS_PATH, user_secret)
    auth = {"passwordSecretRef": {"name": "redis-pw"}}
    await kubectl.send("POST", CIS_PATH, service("user", cache={"redis": {"auth": auth}}))
    await kubectl.send("POST", CIS_PATH, service("gen"))
    generated = await eventually(lambda: live(cluster, "v1/secrets", "gen-redis-auth"), "it")
    await eventually(lambda: live(cluster, "v1/secrets", "gen-fleet"), "the fleet Secret")
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "user-redis"), "user's Redis")

    # A lost generated Secret comes back at the next resync (no watch of Secrets), new.
    await kubectl.send("DELETE", f"{SECRETS_PATH}/gen-redis-auth")
    again = await eventually(lambda: live(cluster, "v1/secrets", "gen-redis-auth"), "it again")
    assert again["data"] != generated["data"]

    # Redis pruned; its generated Secret stays, owned, for the garbage collector.
    await kubectl.send("PATCH", f"{CIS_PATH}/gen", {"spec": {"cache": {"mode": "local"}}},
                       patch=True)  # fmt: skip
    await eventually(lambda: live(cluster, "apps/v1/statefulsets", "gen-redis") is None, "pruned")
    kept = must(live(cluster, "v1/secrets", "gen-redis-auth"))
    assert [r["name"] for r in kept["metadata"]["ownerReferences"]] == ["gen"]

    made = [r for r in cluster if r.headers.get("User-Agent") != TEST_AGENT]
    asked = {a for r in made if (a := attributes(r.method, r.url.path, r.params)) is not None}
    assert ("", "secrets", "get") in asked
    assert ("", "secrets", "patch") in asked
    on_secrets = {verb for group, resource, verb in asked if (group, resource) == ("", "secrets")}
    assert on_secrets <= {"get", "create", "patch"}
    assert sorted(a for a in asked if not granted(*a)) == []
