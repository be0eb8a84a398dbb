"""The KServe runtime of examples/kserve and of the chart: its containers fit Kubernetes' own
models and schemas, the namespaced and cluster-wide runtimes and the chart's render say the
same, and the chart renders none unless asked.

KServe's own SDK (``kserve.models``) is not a dev dependency: it brings KServe's model server
(pandas, psutil, protobuf below 7, ...), which conflicts with ours. Its ``ServingRuntimeSpec``
takes the containers as the Kubernetes client's ``V1Container``, which is walked here; the
KServe-level fields are walked against the SDK itself, in its own venv (``tests/kserve_sdk/``,
``scripts/test-kserve-venv``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_validate
import pytest
import yaml
from support.openapi_models import unknown_fields

from delivery.support import NAMESPACE, REPO, Helm, Manifest

KUBERNETES = "1.35"
EXAMPLES = REPO / "examples" / "kserve"
CLUSTER = EXAMPLES / "cluster-serving-runtime.yaml"
NAMESPACED = EXAMPLES / "serving-runtime.yaml"
KSERVE_KINDS = {"ClusterServingRuntime", "ServingRuntime"}


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def resolve(name: str) -> Any:
    return getattr(kubernetes.client, name)


def as_pod(spec: dict[str, Any]) -> dict[str, Any]:
    """The runtime's containers in a Pod, as KServe puts them in the predictor's pod."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "simple-predictor"},
        "spec": {"containers": spec["containers"]},
    }


@pytest.mark.parametrize("path", [CLUSTER, NAMESPACED], ids=lambda p: p.name)
def test_runtime_containers_fit_kubernetes_models_and_schemas(path: Path) -> None:
    runtime = load(path)
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert unknown_fields(spec["containers"], "list[V1Container]", resolve) == []
    kubernetes_validate.validate(as_pod(spec), KUBERNETES, strict=True)


def test_a_misspelt_container_field_is_found() -> None:
    spec = load(CLUSTER)["spec"]
    [container] = spec["containers"]
    container["readinesProbe"] = container.pop("readinessProbe")
    container["env"][0]["valu"] = "local"
    problems = unknown_fields(spec["containers"], "list[V1Container]", resolve)
    assert problems == [
        "[0].env[0].valu: not a field of V1EnvVar",
        "[0].readinesProbe: not a field of V1Container",
    ]


def test_runtime_serves_onnx_and_triton_on_kserve_ports() -> None:
    spec = load(CLUSTER)["spec"]
    formats = {(f["name"], f["version"]) for f in spec["supportedModelFormats"]}
    assert formats == {("onnx", "1"), ("triton", "2")}
    assert set(spec["protocolVersions"]) == {"v2", "grpc-v2"}
    [container] = spec["containers"]
    assert container["name"] == "kserve-container"  # the name KServe merges the predictor into
    args = container["args"]
    assert {"--model-repository=/mnt/models", "--model-name={{.Name}}"} <= set(args)
    assert {"--port=8080", "--grpc-port=9000"} <= set(args)
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] == 8080


def test_namespaced_runtime_is_the_cluster_runtime_in_a_namespace() -> None:
    cluster, namespaced = load(CLUSTER), load(NAMESPACED)
    assert (cluster["kind"], namespaced["kind"]) == ("ClusterServingRuntime", "ServingRuntime")
    assert namespaced["spec"] == cluster["spec"]
    assert "namespace" in namespaced["metadata"]


def test_inference_service_example_picks_the_runtime() -> None:
    service = load(EXAMPLES / "inference-service.yaml")
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == load(CLUSTER)["metadata"]["name"]
    assert model["modelFormat"]["name"] in {"onnx", "triton"}
    [container] = load(CLUSTER)["spec"]["containers"]
    merged = {**container, "env": container["env"] + model["env"]}
    assert unknown_fields([merged], "list[V1Container]", resolve) == []


def kserve_objects(objects: list[Manifest]) -> list[Manifest]:
    return [obj for obj in objects if obj["kind"] in KSERVE_KINDS]


def test_chart_renders_no_kserve_runtime_by_default(default_objects: list[Manifest]) -> None:
    assert kserve_objects(default_objects) == []


@pytest.mark.parametrize("cluster_scoped", [True, False], ids=["cluster", "namespaced"])
def test_chart_renders_the_example_runtime_when_enabled(
    helm: Helm, tmp_path: Path, cluster_scoped: bool
) -> None:
    values = tmp_path / "values.yaml"
    kserve = {"enabled": True, "clusterScoped": cluster_scoped}
    values.write_text(yaml.safe_dump({"kserve": kserve}))
    [runtime] = kserve_objects(helm.template(values))
    example = load(CLUSTER if cluster_scoped else NAMESPACED)
    assert runtime["kind"] == example["kind"]
    assert runtime["metadata"]["name"] == example["metadata"]["name"]
    assert runtime["metadata"].get("namespace") == (None if cluster_scoped else NAMESPACE)
    assert runtime["spec"] == example["spec"]
    kubernetes_validate.validate(as_pod(runtime["spec"]), KUBERNETES, strict=True)


def test_chart_runtime_takes_image_and_cache_settings(helm: Helm, tmp_path: Path) -> None:
    settings = {"enabled": True, "image": "registry.local/cachefleet:dev", "cacheMode": "tiered"}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"kserve": settings}))
    [runtime] = kserve_objects(helm.template(values))
    [container] = runtime["spec"]["containers"]
    assert container["image"] == "registry.local/cachefleet:dev"
    assert {"name": "CACHEFLEET_CACHE", "value": "tiered"} in container["env"]
