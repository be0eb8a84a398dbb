"""Security of what the operator creates and says: secrets stay in Secrets, pods are locked down.

What ``test_render.py`` and ``tests/delivery/test_chart.py`` already assert for fixed specs (the
runtime ConfigMap without the password, the NetworkPolicy's two sources, the chart's operator pod
security context) is not repeated. Added here:

- the running operator (kopf against kmock, logs captured at DEBUG): a generated password, a
  regenerated one, a user-supplied one and an external model server's token, before and after
  its rotation (which rolls the pods), appear in no request body other than a Secret's, no
  stored object other than a Secret (ConfigMaps, pod templates, Events, the CR and its status),
  and no log line, including when Redis refuses the operator's login;
- over generated valid specs: auth is on by default with the password only in the Secret and
  read by Redis from the environment; every pod and container is non-root, read-only,
  seccomp RuntimeDefault, without privilege escalation or capabilities, host namespaces or
  service-account token;
- the NetworkPolicy admits exactly this service's runtime pods and the pods of the operator the
  chart installs (labels and namespace from the real ``helm template``), not another service's
  pods; switched off on a live object it is deleted, switched on it comes back.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from typing import Any

import pytest
from delivery.support import NAMESPACE, RELEASE, Helm, Manifest, only, require_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.kube.cluster import Cluster
from support.kube.fixtures import CIS_PATH, NS, Api, cis, condition, eventually, live, must, service
from support.kube.spec_strategies import valid_specs

from cachefleet.operator.manifests.children import build_children, needs_generated_password
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.model_fetch import MAX_BYTES_VARIABLE, SCRATCH_VARIABLE
from cachefleet.operator.manifests.spec import parse_spec

pytest_plugins = ("support.kube.fixtures",)
pytestmark = pytest.mark.timeout(120)

OWNER = Owner("svc", "ml", "3f0e6c1a-8d2b-4e57-a1c9-0b7d5e2f4a66")
USER_PASSWORD = "user-supplied-Zq8vR2mK7pX4wN9t"
#: An external model server's token (``spec.server.authSecretRef``), before and after rotation.
UPSTREAM_TOKENS = ("Bearer upstream-one-Hk4qT7wZ2", "Bearer upstream-two-Rm9sD3xV6")
PODS = ("Deployment", "StatefulSet")
PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
passwords = st.text(st.characters(min_codepoint=48, max_codepoint=122), min_size=24, max_size=43)


def forms(password: str) -> set[str]:
    """The password as it may be written: plain, and base64 as a Secret's data holds it."""
    return {password, base64.b64encode(password.encode()).decode()}


def leaks(text: str, secrets: set[str]) -> list[str]:
    return [s for s in secrets if s in text]


#: The generated cache secret (the key of the entries' MAC) these renders stand in.
CACHE_SECRET = "generated-cache-secret-Zq81"


def render(spec: dict[str, Any], password: str) -> list[dict[str, Any]]:
    parsed = parse_spec(spec)
    generated = password if needs_generated_password(parsed) else None
    return build_children(parsed, owner=OWNER, redis_password=generated, cache_secret=CACHE_SECRET)


# ---------------------------------------------------------------------------------------------
# The running operator: passwords in requests, objects, events, status and logs
# ---------------------------------------------------------------------------------------------


def secret_body(name: str, password: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NS},
        "data": {"password": base64.b64encode(password.encode()).decode()},
    }


def pod_hash(obj: dict[str, Any] | None) -> str:
    return str(
        must(obj)["spec"]["template"]["metadata"]["annotations"]["cachefleet.io/config-hash"]
    )


def upstream_hash(obj: dict[str, Any] | None) -> str | None:
    annotations: dict[str, str] = must(obj)["spec"]["template"]["metadata"]["annotations"]
    return annotations.get("cachefleet.io/upstream-hash")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def runtime_ready(cluster: Cluster, name: str) -> dict[str, Any] | None:
    return condition(cis(cluster, name), "RuntimeReady")


def password_of(secret: dict[str, Any] | None) -> str:
    return base64.b64decode(must(secret)["data"]["password"]).decode()


async def test_no_password_leaves_its_secret_in_requests_objects_events_status_or_logs(
    cluster: Cluster,
    api: Api,
    start_operator: Callable[[], Any],
    make_redis: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # One real Redis stands behind every service: it takes the user's password, and refuses
    # the generated one, so both the login and the refused-login paths run.
    redis = make_redis(password=USER_PASSWORD)
    monkeypatch.setenv("CACHEFLEET_OPERATOR_REDIS_ADDRESS", f"127.0.0.1:{redis.port}")
    monkeypatch.setenv("CACHEFLEET_OPERATOR_REDIS_TIMEOUT", "0.5")
    await start_operator()
    await api.send("POST", f"/api/v1/namespaces/{NS}/secrets", secret_body("team", USER_PASSWORD))
    # An external model server's token, read by the operator for its digest, then rotated
    # (first, while no other fleet's rollout holds up this one's).
    token = {
        **secret_body("upstream", UPSTREAM_TOKENS[0]),
        "data": {"token": b64(UPSTREAM_TOKENS[0])},
    }
    await api.send("POST", f"/api/v1/namespaces/{NS}/secrets", token)
    server = {"kind": "external", "url": "grpcs://triton.ml.svc:8001",
              "authSecretRef": {"name": "upstream", "key": "token"}}  # fmt: skip
    up = service("up", model={"name": "m"}, server=server, cache={"mode": "local"})
    await api.send("POST", CIS_PATH, up)
    await eventually(partial(runtime_ready, cluster, "up"), "status")
    rotated_from = upstream_hash(live(cluster, "apps/v1/deployments", "up"))
    assert rotated_from
    rotation = {"data": {"token": b64(UPSTREAM_TOKENS[1])}}
    await api.send("PATCH", f"/api/v1/namespaces/{NS}/secrets/upstream", rotation, patch=True)
    await api.send("PATCH", f"{CIS_PATH}/up", {"spec": {"replicas": 3}}, patch=True)
    await eventually(
        lambda: upstream_hash(live(cluster, "apps/v1/deployments", "up")) != rotated_from,
        "the runtime rolled for the rotated upstream token",
    )
    own = {"auth": {"passwordSecretRef": {"name": "team"}}, "maxmemory": "64Mi"}
    external = {"external": {"url": "redis://shared:6379/0", "passwordSecretRef": {"name": "team"}}}
    await api.send("POST", CIS_PATH, service("gen"))
    await api.send("POST", CIS_PATH, service("own", cache={"redis": own}))
    await api.send("POST", CIS_PATH, service("ext", cache={"mode": "redis", "redis": external}))
    first = password_of(
        await eventually(lambda: live(cluster, "v1/secrets", "gen-redis-auth"), "the Secret")
    )
    for name in ("gen", "own", "ext"):
        await eventually(partial(runtime_ready, cluster, name), "status")

    # Redis pods become ready: the operator logs in to set maxmemory live (refused for "gen").
    for name in ("gen-redis", "own-redis"):
        path = f"/apis/apps/v1/namespaces/{NS}/statefulsets/{name}/status"
        await api.send("PATCH", path, {"status": {"readyReplicas": 1}}, patch=True)
    for name in ("gen", "own"):
        await api.send("PATCH", f"{CIS_PATH}/{name}", {"spec": {"replicas": 3}}, patch=True)

    def refused() -> dict[str, Any] | None:
        redis_ready = condition(cis(cluster, "gen"), "RedisReady")
        return redis_ready if redis_ready and redis_ready["reason"] == "ConfigSetFailed" else None

    await eventually(refused, "the refused login as a condition")
    await eventually(
        lambda: redis.client().config_get("maxmemory")["maxmemory"] == str(64 * 2**20),
        "CONFIG SET with the user's password",
    )
    # A lost Secret gets a new password: that one must not leak either.
    rolled_from = pod_hash(live(cluster, "apps/v1/statefulsets", "gen-redis"))
    await api.send("DELETE", f"/api/v1/namespaces/{NS}/secrets/gen-redis-auth")

    def renewed() -> dict[str, Any] | None:
        secret = live(cluster, "v1/secrets", "gen-redis-auth")
        return secret if secret and password_of(secret) != first else None

    second = password_of(await eventually(renewed, "a new generated password"))
    await eventually(
        lambda: pod_hash(live(cluster, "apps/v1/statefulsets", "gen-redis")) != rolled_from,
        "Redis rolled for the new password",
    )

    # The generated tokens of the runtime's restricted admin APIs are secrets too.
    tokens: set[str] = set()
    for name in ("gen", "own", "ext"):
        fleet = must(live(cluster, "v1/secrets", f"{name}-fleet"))
        tokens |= forms(base64.b64decode(fleet["data"]["admin-token"]).decode())
    upstream_tokens = {form for token in UPSTREAM_TOKENS for form in forms(token)}
    secrets = forms(first) | forms(second) | forms(USER_PASSWORD) | tokens | upstream_tokens
    writes = [r for r in cluster if r.method in ("POST", "PATCH", "PUT")]
    assert len(writes) > 20
    secret_writes = [r.body.decode() for r in writes if "/secrets" in r.url.path]
    assert leaks("".join(secret_writes), forms(second)), "the detector sees the Secret's write"
    for request in writes:
        if "/secrets" in request.url.path:
            continue
        body = request.body.decode(errors="replace") if request.body else ""
        assert not leaks(body + request.url.query_string, secrets), (request.method, request.url)
    stored = [dict(obj.raw) for obj in cluster.objects.values() if not obj.deleted]
    for obj in stored:  # kopf posts Events without a kind
        obj.setdefault("kind", "Event" if "involvedObject" in obj else "?")
    kinds = {obj["kind"] for obj in stored}
    assert {"Event", "ConfigMap", "Deployment", "StatefulSet", "CachedInferenceService"} <= kinds
    for obj in stored:
        if obj.get("kind") != "Secret":
            assert not leaks(json.dumps(obj), secrets), f"{obj['kind']}/{obj['metadata']['name']}"
    assert [e for e in stored if e.get("kind") == "Event" and e.get("type") == "Warning"]
    for name in ("gen", "own", "ext"):
        assert must(cis(cluster, name))["status"]["observedGeneration"] >= 1
    records = caplog.records
    assert len(records) > 50
    assert any("invalid username-password" in r.getMessage() for r in records)
    for record in records:
        text = record.getMessage() + (record.exc_text or "") + repr(getattr(record, "exc_info", ""))
        assert not leaks(text, secrets), f"{record.name}: {record.getMessage()[:200]}"


# ---------------------------------------------------------------------------------------------
# Rendered objects over generated specs
# ---------------------------------------------------------------------------------------------


def pod_specs(children: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for child in children:
        if child["kind"] in PODS:
            yield child["metadata"]["name"], child["spec"]["template"]["spec"]


@PROFILE
@given(valid_specs, passwords)
def test_managed_redis_requires_a_password_held_only_in_its_secret(
    spec: dict[str, Any], password: str
) -> None:
    children = render(spec, password)
    parsed = parse_spec(spec)
    for child in children:
        if child["kind"] != "Secret":
            assert not leaks(json.dumps(child), forms(password)), child["kind"]
            assert not leaks(json.dumps(child), forms(CACHE_SECRET)), child["kind"]
    # What the user wrote for the Triton container is passed as written: a literal there is
    # the user's own (a secret belongs in its valueFrom).
    written = [e.as_dict() for e in parsed.server.env] if parsed.server else []
    for name, pod in pod_specs(children):
        for container in pod["containers"] + pod.get("initContainers", []):
            for env in container.get("env", []):
                if container["name"] == "triton" and env in written:
                    continue
                if env["name"].endswith(("_RESTRICTED_API", "_RESTRICTED_PROTOCOL")):
                    # Literal, but its secret is a reference to a variable read from a Secret.
                    assert env["value"].endswith("=$(CACHEFLEET_ADMIN_TOKEN)"), name
                    continue
                if env["name"].startswith("OTEL_") and env["name"] != "OTEL_EXPORTER_OTLP_HEADERS":
                    # Tracing settings, no secret: the collector's headers (which may hold
                    # one) are the exception, a Secret reference like the others.
                    continue
                if env["name"] == MAX_BYTES_VARIABLE:
                    # The model download's size bound: the spec's storageSizeLimit, no secret.
                    assert env["value"] == str(parsed.model.storage_size_limit), name
                    continue
                if env["name"] == SCRATCH_VARIABLE:
                    # Where the zip's scratch emptyDir is mounted: a path, no secret.
                    assert env["value"].startswith("/"), name
                    continue
                assert "value" not in env, f"{name}: a literal env value {env['name']}"
    if not parsed.cache.managed_redis:
        assert not [c for c in children if c["kind"] == "StatefulSet"]
        return
    [statefulset] = [c for c in children if c["kind"] == "StatefulSet"]
    [redis] = statefulset["spec"]["template"]["spec"]["containers"]
    auth = parsed.cache.redis.auth_or_default
    if "auth" not in (spec.get("cache", {}).get("redis") or {}):
        assert auth.enabled  # on unless switched off
    if auth.enabled:
        assert 'requirepass "$hex"' in redis["command"][-1]  # on Redis's input
        assert "--requirepass" not in redis["command"][-1]  # never on its command line
        [ref] = [e for e in redis["env"] if e["name"] == "REDIS_PASSWORD"]
        secret_name = ref["valueFrom"]["secretKeyRef"]["name"]
        if needs_generated_password(parsed):
            [secret] = [
                c for c in children if c["kind"] == "Secret" and "password" in c.get("data", {})
            ]
            assert secret["metadata"]["name"] == secret_name
            assert "stringData" not in secret
    else:
        assert "requirepass" not in redis["command"][-1]


def assert_locked_down(where: str, pod: Mapping[str, Any]) -> None:
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True, where
    # Ids left to the platform (userIds: platform) are assigned there, from a non-root range.
    assert security.get("runAsUser", 1) > 0, where
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}, where
    assert pod["automountServiceAccountToken"] is False, where
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host), where
    assert not [v for v in pod["volumes"] if "hostPath" in v], where
    for container in pod["containers"] + pod.get("initContainers", []):
        context = container["securityContext"]
        here = f"{where}/{container['name']}"
        assert context["allowPrivilegeEscalation"] is False, here
        assert context["readOnlyRootFilesystem"] is True, here
        assert context["capabilities"] == {"drop": ["ALL"]}, here
        assert not context.get("privileged"), here
        assert context.get("runAsUser", security.get("runAsUser")) != 0, here


@PROFILE
@given(valid_specs)
def test_every_pod_runs_non_root_read_only_without_privileges(spec: dict[str, Any]) -> None:
    for name, pod in pod_specs(render(spec, "p" * 32)):
        assert_locked_down(name, pod)
        # A read-only root filesystem: every path the processes write to is a volume.
        writable = {m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
        assert "/tmp" in writable, name


# ---------------------------------------------------------------------------------------------
# The NetworkPolicy, matched like the network plugin matches it
# ---------------------------------------------------------------------------------------------


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A LabelSelector with matchLabels only (what the operator writes) against labels."""
    assert set(selector) <= {"matchLabels"}, selector
    return dict(selector.get("matchLabels", {})).items() <= dict(labels).items()


def admitted(policy: Mapping[str, Any], pod_labels: Mapping[str, str], namespace: str) -> bool:
    """Whether one ingress rule lets a pod with these labels in this namespace connect."""
    namespace_labels = {"kubernetes.io/metadata.name": namespace}
    for rule in policy["spec"]["ingress"]:
        for source in rule["from"]:
            in_namespace = (
                selects(source["namespaceSelector"], namespace_labels)
                if "namespaceSelector" in source
                else namespace == policy["metadata"]["namespace"]
            )
            if in_namespace and selects(source.get("podSelector", {}), pod_labels):
                return True
    return False


def template_labels(children: list[dict[str, Any]], kind: str) -> dict[str, str]:
    [obj] = [c for c in children if c["kind"] == kind]
    return dict(obj["spec"]["template"]["metadata"]["labels"])


@pytest.fixture(scope="module")
def chart_operator() -> tuple[dict[str, str], str]:
    """The labels and namespace of the operator pods the chart installs (real helm)."""
    helm = Helm(require_tool("helm", "run scripts/get-helm"))
    objects: list[Manifest] = helm.template()
    deployment = only(objects, "Deployment", f"{RELEASE}-operator")
    namespace = deployment["metadata"].get("namespace", NAMESPACE)
    return dict(deployment["spec"]["template"]["metadata"]["labels"]), namespace


def test_network_policy_admits_this_services_runtime_and_the_charts_operator_only(
    chart_operator: tuple[dict[str, str], str],
) -> None:
    spec = {"model": {"name": "m", "repository": {"pvc": {"claimName": "models"}}}}
    children = render(spec, "p" * 32)
    other = build_children(
        parse_spec(spec), owner=Owner("other", "ml", "x"), redis_password="p", cache_secret="c"
    )
    [policy] = [c for c in children if c["kind"] == "NetworkPolicy"]
    assert selects(policy["spec"]["podSelector"], template_labels(children, "StatefulSet"))
    assert not selects(policy["spec"]["podSelector"], template_labels(other, "StatefulSet"))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert [rule["ports"] for rule in policy["spec"]["ingress"]] == [
        [{"protocol": "TCP", "port": 6379}]
    ]

    assert admitted(policy, template_labels(children, "Deployment"), "ml")
    assert not admitted(policy, template_labels(other, "Deployment"), "ml")
    assert not admitted(policy, template_labels(children, "Deployment"), "elsewhere")
    assert not admitted(policy, template_labels(other, "StatefulSet"), "ml")
    labels, namespace = chart_operator
    assert admitted(policy, labels, namespace)
    assert not admitted(policy, labels, "ml")  # operator-looking pods elsewhere are not let in
    moved = {**spec, "cache": {"redis": {"networkPolicy": {"operatorNamespace": "ops"}}}}
    [policy] = [c for c in render(moved, "p" * 32) if c["kind"] == "NetworkPolicy"]
    assert admitted(policy, labels, "ops")
    assert not admitted(policy, labels, namespace)


@pytest.mark.usefixtures("operator")
async def test_network_policy_switched_off_is_deleted_and_on_again_comes_back(
    cluster: Cluster, api: Api
) -> None:
    policy = "networking.k8s.io/v1/networkpolicies"
    await api.send("POST", CIS_PATH, service("svc"))
    first = await eventually(lambda: live(cluster, policy, "svc-redis"), "the NetworkPolicy")
    switch = {"spec": {"cache": {"redis": {"networkPolicy": {"enabled": False}}}}}
    await api.send("PATCH", f"{CIS_PATH}/svc", switch, patch=True)
    await eventually(lambda: live(cluster, policy, "svc-redis") is None, "the policy deleted")
    assert live(cluster, "apps/v1/statefulsets", "svc-redis") is not None  # Redis stays
    switch["spec"]["cache"]["redis"]["networkPolicy"]["enabled"] = True
    await api.send("PATCH", f"{CIS_PATH}/svc", switch, patch=True)
    again = await eventually(lambda: live(cluster, policy, "svc-redis"), "the policy back")
    assert again["spec"] == first["spec"]


@pytest.mark.parametrize(
    "url", ["redis://:pw-in-url@cache:6379/0", "redis://cache:6379/0?password=pw-in-url"]
)
def test_an_external_url_with_a_password_is_refused_pointing_at_the_secret_ref(url: str) -> None:
    from cachefleet.operator.manifests.errors import SpecError

    spec = {
        "model": {"name": "simple", "repository": {"pvc": {"claimName": "models"}}},
        "cache": {"mode": "redis", "redis": {"external": {"url": url}}},
    }
    with pytest.raises(SpecError, match="passwordSecretRef") as refused:
        parse_spec(spec)
    assert "pw-in-url" not in str(refused.value)
