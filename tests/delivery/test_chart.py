"""The Helm chart, rendered by the real helm binary and checked against Kubernetes' own schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cachefleet.cli.main import build_parser
from cachefleet.operator.manifests.upstream import TRITON_METRICS_PORT_NAME
from cachefleet.operator.reconcile.settings import OperatorSettings
from delivery.support import CHART, NAMESPACE, RELEASE, REPO, Helm, Manifest, find, only

#: The Kubernetes version the rendered objects are validated against.
KUBERNETES = "1.35"
#: Kinds from CRDs that kubernetes-validate has no schema for; checked field by field below.
CUSTOM_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor")}
OPERATOR = f"{RELEASE}-operator"


def operator_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = yaml.safe_load((REPO / "operator" / "rbac.yaml").read_text())
    return rules


def container(objects: list[Manifest]) -> dict[str, Any]:
    """The operator Deployment's one container."""
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    (operator,) = pod["containers"]
    return dict(operator)


@pytest.mark.parametrize("with_custom_values", [False, True], ids=["default", "custom"])
def test_helm_lint_is_clean(helm: Helm, custom_values: Path, with_custom_values: bool) -> None:
    args = ["lint", str(CHART), "--strict"]
    if with_custom_values:
        args += ["--values", str(custom_values)]
    result = helm.run(*args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[WARNING]" not in result.stdout, result.stdout
    assert "[ERROR]" not in result.stdout, result.stdout


@pytest.mark.parametrize("values", ["default", "custom"])
def test_every_rendered_object_is_valid_kubernetes(
    values: str, default_objects: list[Manifest], custom_objects: list[Manifest]
) -> None:
    objects = default_objects if values == "default" else custom_objects
    checked = 0
    for obj in objects:
        if (obj["apiVersion"], obj["kind"]) in CUSTOM_KINDS:
            continue  # no OpenAPI schema ships for CRD kinds; test_service_monitor checks it
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        checked += 1
    assert checked >= 5


def test_default_install_watches_every_namespace_with_the_operator_rules(
    default_objects: list[Manifest],
) -> None:
    kinds = sorted(obj["kind"] for obj in default_objects)
    assert kinds == sorted(
        [
            "CustomResourceDefinition",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
        ]
    )
    assert only(default_objects, "ClusterRole", OPERATOR)["rules"] == operator_rules()
    binding = only(default_objects, "ClusterRoleBinding", OPERATOR)
    assert binding["roleRef"]["name"] == OPERATOR
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": OPERATOR, "namespace": NAMESPACE}
    ]
    operator = container(default_objects)
    assert operator["command"] == ["cachefleet"]
    assert operator["args"] == [
        "operator",
        "--liveness=http://0.0.0.0:8080/healthz",
        "--metrics-port=8081",
        "--standalone",
        "--all-namespaces",
    ]


def test_watch_namespaces_get_a_role_each_and_keep_only_discovery_cluster_wide(
    custom_objects: list[Manifest],
) -> None:
    roles = {obj["metadata"]["namespace"]: obj for obj in find(custom_objects, "Role")}
    bindings = {obj["metadata"]["namespace"]: obj for obj in find(custom_objects, "RoleBinding")}
    assert sorted(roles) == sorted(bindings) == ["team-a", "team-b"]
    for namespace, binding in bindings.items():
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": roles[namespace]["metadata"]["name"],
        }
        assert binding["subjects"][0]["namespace"] == NAMESPACE
    cluster_rules = only(custom_objects, "ClusterRole", OPERATOR)["rules"]
    cluster_resources = {r for rule in cluster_rules for r in rule["resources"]}
    assert cluster_resources == {"namespaces", "customresourcedefinitions"}
    # Together the Role and the ClusterRole grant exactly operator/rbac.yaml, nothing more.
    role_rules = roles["team-a"]["rules"]
    assert sorted(map(repr, role_rules + cluster_rules)) == sorted(map(repr, operator_rules()))
    assert roles["team-a"]["rules"] == roles["team-b"]["rules"]

    args = container(custom_objects)["args"]
    assert "--all-namespaces" not in args
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=team-a",
        "--namespace=team-b",
    ]
    assert args[-1] == "--verbose"


@pytest.mark.parametrize("values", ["default", "custom"])
def test_operator_pod_is_locked_down(
    values: str, default_objects: list[Manifest], custom_objects: list[Manifest]
) -> None:
    objects = default_objects if values == "default" else custom_objects
    pod = only(objects, "Deployment", OPERATOR)["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    operator = container(objects)
    security = operator["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    # With a read-only root, /tmp is the one writable place.
    assert {m["mountPath"] for m in operator["volumeMounts"]} == {"/tmp"}
    # The kubelet probes the endpoint kopf serves.
    probe = operator["livenessProbe"]["httpGet"]
    port = next(p for p in operator["ports"] if p["name"] == probe["port"])
    assert probe["path"] == "/healthz"
    assert f"--liveness=http://0.0.0.0:{port['containerPort']}/healthz" in operator["args"]
    assert operator["resources"]["limits"]["memory"]


@pytest.mark.parametrize("values", ["default", "custom"])
def test_operator_pods_carry_the_labels_the_redis_network_policy_admits(
    values: str, default_objects: list[Manifest], custom_objects: list[Manifest]
) -> None:
    objects = default_objects if values == "default" else custom_objects
    labels = only(objects, "Deployment", OPERATOR)["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "cachefleet"
    assert labels["app.kubernetes.io/component"] == "operator"


def test_custom_values_reach_the_deployment(custom_objects: list[Manifest]) -> None:
    deployment = only(custom_objects, "Deployment", OPERATOR)
    pod = deployment["spec"]["template"]
    operator = container(custom_objects)
    assert operator["image"] == (
        "registry.example.com/ml/cachefleet-operator@sha256:"
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    )
    assert operator["resources"] == {
        "requests": {"cpu": "200m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "512Mi"},
    }
    assert {"name": "TZ", "value": "UTC"} in operator["env"]
    assert pod["metadata"]["annotations"]["example.com/team"] == "ml-platform"
    assert pod["metadata"]["labels"]["example.com/cost-center"] == "4711"
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["spec"]["tolerations"][0]["key"] == "dedicated"
    assert pod["spec"]["priorityClassName"] == "system-cluster-critical"
    account = only(custom_objects, "ServiceAccount", OPERATOR)
    assert account["metadata"]["annotations"] == {"iam.example.com/role": "cachefleet-operator"}


def test_the_policy_allow_lists_reach_the_operators_settings(
    custom_objects: list[Manifest], default_objects: list[Manifest]
) -> None:
    env = {e["name"]: e.get("value") for e in container(custom_objects)["env"]}
    settings = OperatorSettings.from_environ({k: v for k, v in env.items() if v is not None})
    assert settings.allowed_images == ("registry.example.com/ml/", "ghcr.io/cachefleet")
    assert settings.allowed_service_accounts == ("default", "inference")
    assert settings.external_redis_hosts == ("*.redis.example.com",)
    # By default nothing is listed: any image and ServiceAccount, no tenant Redis host dialled.
    defaults = {e["name"] for e in container(default_objects)["env"]}
    assert not {n for n in defaults if "ALLOWED" in n or "REDIS_HOSTS" in n}
    # The namespaced install (the same custom values) grants Secrets only in its namespaces.
    for role in find(custom_objects, "Role"):
        if any("secrets" in rule["resources"] for rule in role["rules"]):
            assert role["metadata"]["namespace"] in ("team-a", "team-b")
    cluster_rules = only(custom_objects, "ClusterRole", OPERATOR)["rules"]
    assert not [r for r in cluster_rules if "secrets" in r["resources"]]


def test_service_monitor_scrapes_the_runtime_services_of_the_watched_namespaces(
    custom_objects: list[Manifest], default_objects: list[Manifest]
) -> None:
    assert not list(find(default_objects, "ServiceMonitor"))
    monitor = only(custom_objects, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "runtime"
    ports = []
    for endpoint in spec["endpoints"]:  # (one per scheme: test_chart_tls)
        ports.append(endpoint["port"])
        assert endpoint["path"] == "/metrics"
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("15s", "10s")
    # cachefleet's own port, and the port the operator gives a Triton beside it (spec.server).
    assert ports == ["http", "http", TRITON_METRICS_PORT_NAME]


def test_dashboard_config_map_is_labelled_for_the_grafana_sidecar(
    custom_objects: list[Manifest], default_objects: list[Manifest]
) -> None:
    assert not [o for o in find(default_objects, "ConfigMap") if "dashboard" in str(o)]
    config_map = only(custom_objects, "ConfigMap", f"{RELEASE}-dashboard")
    assert config_map["metadata"]["namespace"] == "monitoring"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Inference"}
    assert list(config_map["data"]) == ["cachefleet-cache.json"]


@pytest.mark.parametrize(
    ("setting", "complaint"),
    [
        ("imagee.tag=1", "additional properties 'imagee' not allowed"),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        ("watchNamespaces={Team_A}", "/watchNamespaces/0"),
        ("resources.limits.memory=lots", "/resources/limits/memory"),
        ("serviceMonitor.interval=often", "/serviceMonitor/interval"),
        ("liveness.port=0", "/liveness/port"),
        ("policy.allowedImages={a b}", "/policy/allowedImages/0"),
        ("policy.allowedServiceAccounts={Admin}", "/policy/allowedServiceAccounts/0"),
        ("policy.allowedregistries={x}", "additional properties 'allowedregistries' not allowed"),
    ],
)
def test_values_schema_rejects_wrong_values(helm: Helm, setting: str, complaint: str) -> None:
    result = helm.run("template", RELEASE, str(CHART), "--set", setting)
    assert result.returncode != 0
    assert complaint in result.stderr


def test_install_notes_tell_the_next_step(helm: Helm) -> None:
    result = helm.run("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client")
    assert result.returncode == 0, result.stderr
    notes = result.stdout.split("NOTES:", 1)[1]
    assert "kubectl apply -f examples/simple-cpu.yaml" in notes
    assert (REPO / "examples" / "simple-cpu.yaml").is_file()
    assert "kubectl get cis" in notes
    assert f"rollout status deployment/{OPERATOR}" in notes


@pytest.mark.parametrize("values", ["default", "custom"])
def test_the_cli_accepts_the_operator_command_line(
    values: str, default_objects: list[Manifest], custom_objects: list[Manifest]
) -> None:
    objects = default_objects if values == "default" else custom_objects
    operator = container(objects)
    assert operator["command"] == ["cachefleet"]
    args = build_parser().parse_args(operator["args"])  # exits on an unknown option
    assert args.command == "operator"
    if values == "default":
        assert args.all_namespaces
    else:
        assert args.namespace == ["team-a", "team-b"]
        assert args.verbose


def secret_verbs(rules: list[dict[str, Any]]) -> set[str]:
    return {v for rule in rules if "secrets" in rule["resources"] for v in rule["verbs"]}


def test_no_install_lets_the_operator_list_watch_or_delete_secrets(
    default_objects: list[Manifest], custom_objects: list[Manifest]
) -> None:
    # The default (all namespaces) install: a ClusterRole, so these verbs hold for every Secret
    # of the cluster, kube-system's and Helm's release Secrets included.
    default = only(default_objects, "ClusterRole", OPERATOR)["rules"]
    assert secret_verbs(default) == {"get", "create", "patch"}
    # Namespaced (watchNamespaces): each Role, and nothing on Secrets cluster-wide.
    assert secret_verbs(only(custom_objects, "ClusterRole", OPERATOR)["rules"]) == set()
    roles = list(find(custom_objects, "Role"))
    assert roles
    assert [secret_verbs(role["rules"]) for role in roles] == [{"get", "create", "patch"}] * len(
        roles
    )
