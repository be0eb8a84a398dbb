"""cachefleet in front of KServe's Triton: the ``cachefleet-upstream`` runtime and the pair of
InferenceServices of ``examples/kserve/triton-upstream.yaml`` (a Triton predictor, and the
cachefleet predictor its clients call).

Checked here: the runtime's container fits Kubernetes' models and schemas; the front picks the
runtime and a model format it serves, with no model files of its own; KServe's templating of
``{{.Name}}`` and ``{{.Namespace}}`` turns the runtime's default upstream into the Triton
predictor's Service (a RawDeployment's plain Service); and ``cachefleet serve`` reads the merged
container (the runtime's args and env, the InferenceService's env over them by name, as KServe
merges them) into upstream settings its own start checks accept. The KServe-level fields are
walked against KServe's SDK in ``tests/kserve_sdk/`` (``scripts/test-kserve-venv``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes_validate
import yaml
from support.openapi_models import unknown_fields

from cachefleet.runtime.config import add_flags, load_settings
from cachefleet.runtime.preflight import check_startup
from delivery.support import NAMESPACE, REPO, Helm, Manifest

KUBERNETES = "1.35"
EXAMPLES = REPO / "examples" / "kserve"
RUNTIME = EXAMPLES / "upstream-serving-runtime.yaml"
PAIR = EXAMPLES / "triton-upstream.yaml"


def resolve(name: str) -> Any:
    return getattr(kubernetes.client, name)


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def services() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(PAIR.read_text())}


def kserve_template(text: str, service: dict[str, Any]) -> str:
    """What KServe does to a runtime's container for an InferenceService (its placeholders)."""
    meta = service["metadata"]
    return text.replace("{{.Name}}", meta["name"]).replace("{{.Namespace}}", meta["namespace"])


def merged_container(service: dict[str, Any]) -> dict[str, Any]:
    """The predictor's container: the runtime's, its placeholders filled, the
    InferenceService's env over the runtime's by name."""
    [container] = load(RUNTIME)["spec"]["containers"]
    container = yaml.safe_load(kserve_template(yaml.safe_dump(container), service))
    env = {v["name"]: v for v in container["env"]}
    env.update({v["name"]: v for v in service["spec"]["predictor"]["model"].get("env", [])})
    return {**container, "env": list(env.values())}


def test_the_upstream_runtime_fits_kubernetes_and_serves_triton_models_on_kserve_ports() -> None:
    runtime = load(RUNTIME)
    spec = runtime["spec"]
    assert unknown_fields(spec["containers"], "list[V1Container]", resolve) == []
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "densenet-predictor"},
           "spec": {"containers": spec["containers"]}}  # fmt: skip
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    assert [(f["name"], f["version"]) for f in spec["supportedModelFormats"]] == [("triton", "2")]
    assert not spec["supportedModelFormats"][0]["autoSelect"]  # chosen by name only
    [container] = spec["containers"]
    assert container["name"] == "kserve-container"
    assert {"--port=8080", "--grpc-port=9000"} <= set(container["args"])
    assert not any(a.startswith("--model-repository") for a in container["args"])
    # The startup probe waits out Triton's model loading (as the operator's kind triton does).
    assert container["startupProbe"]["failureThreshold"] >= 180


def test_the_front_reaches_the_triton_predictor_by_the_runtimes_default_upstream() -> None:
    found = services()
    front = found["densenet"]
    model = front["spec"]["predictor"]["model"]
    assert model["runtime"] == load(RUNTIME)["metadata"]["name"]
    assert model["modelFormat"]["name"] == "triton"
    assert "storageUri" not in model  # the models are the Triton predictor's
    triton = found[f"{front['metadata']['name']}-triton"]
    assert triton["metadata"]["namespace"] == front["metadata"]["namespace"]
    assert triton["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    assert triton["spec"]["predictor"]["model"]["runtime"] == "kserve-tritonserver"
    [upstream] = [v for v in merged_container(front)["env"] if v["name"] == "CACHEFLEET_UPSTREAM"]
    service = f"{triton['metadata']['name']}-predictor.{triton['metadata']['namespace']}"
    assert upstream["value"] == f"http://{service}.svc.cluster.local:80"


def test_cachefleet_serve_reads_the_merged_predictor_container(tmp_path: Path) -> None:
    container = merged_container(services()["densenet"])
    environ = {
        v["name"]: v.get("value", "redis://cache.models.svc:6379/0") for v in container["env"]
    }
    parser = argparse.ArgumentParser()
    add_flags(parser)
    assert container["args"][0] == "serve"
    settings = load_settings(parser.parse_args(container["args"][1:]), environ=environ)
    assert settings.upstream.url == "http://densenet-triton-predictor.models.svc.cluster.local:80"
    assert settings.models.repository is None
    assert settings.models.cache_all_models
    assert settings.cache.mode == "tiered"
    check_startup(settings)


def kserve_runtimes(objects: list[Manifest]) -> dict[str, Manifest]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"].endswith("ServingRuntime")}


def test_the_chart_renders_the_example_upstream_runtime_when_asked(
    helm: Helm, tmp_path: Path
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"kserve": {"enabled": True}}))
    assert list(kserve_runtimes(helm.template(values))) == ["cachefleet"]  # off by default
    asked = {"enabled": True, "clusterScoped": False, "upstream": {"enabled": True}}
    values.write_text(yaml.safe_dump({"kserve": asked}))
    runtimes = kserve_runtimes(helm.template(values))
    assert sorted(runtimes) == ["cachefleet", "cachefleet-upstream"]
    example = load(RUNTIME)
    rendered = runtimes["cachefleet-upstream"]
    assert rendered["kind"] == example["kind"]
    assert rendered["metadata"]["namespace"] == NAMESPACE
    assert rendered["spec"] == example["spec"]
