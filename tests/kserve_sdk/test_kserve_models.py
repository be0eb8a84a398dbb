"""Every KServe object we ship fits KServe's own models: the examples in ``examples/kserve/``,
the runtime the chart renders with ``kserve.enabled=true`` and the YAML of the KServe guide.

Each object is walked against the SDK's generated models (``kserve.models``, and the Kubernetes
client's for the containers and metadata they embed), field by field: a field KServe does not
know (a misspelling included), a value of the wrong type or a missing required field fails. The
SDK's models carry no enumerations, so the protocol fields are held to the SDK's own
``PredictorProtocol``. KServe
does not publish its CRDs' YAML in any package of the index, so its models are the schema here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import yaml
from delivery.support import REPO, Helm, Manifest, load_all, require_tool
from support.openapi_models import Enums, unknown_fields

# The SDK is installed in its own venv only, by scripts/test-kserve-venv (which fails when it does
# not import): a run from the development venv that reaches this folder says where it runs.
pytest.importorskip("kserve", reason="runs in KServe's SDK venv: bash scripts/test-kserve-venv")
import kserve.models
from kserve.constants import constants

EXAMPLES = sorted((REPO / "examples" / "kserve").glob("*.yaml"))
GUIDE = REPO / "docs" / "guide" / "kserve.md"
#: The protocols KServe's SDK knows, the values of every protocol field of its models.
PROTOCOLS = frozenset(protocol.value for protocol in constants.PredictorProtocol)
#: Where the guide's YAML fragments (blocks without an apiVersion) sit, by their one top key.
FRAGMENTS = {"model": "V1beta1PredictorSpec"}


def resolve(name: str) -> Any:
    """A model of the SDK, or of the Kubernetes client for the types KServe embeds."""
    return getattr(kserve.models, name, None) or getattr(kubernetes.client, name)


def protocol_fields() -> Enums:
    """Every field of the SDK's models that names a protocol (``protocolVersion(s)``)."""
    return {
        (name, field): PROTOCOLS
        for name in dir(kserve.models)
        for field in getattr(getattr(kserve.models, name), "attribute_map", {}).values()
        if field in {"protocolVersion", "protocolVersions"}
    }


ENUMS = protocol_fields()


def model_name(obj: Manifest) -> str:
    """The SDK's model for the object's ``apiVersion`` and ``kind`` (``V1alpha1ServingRuntime``)."""
    group, _, version = obj["apiVersion"].partition("/")
    assert group == constants.KSERVE_GROUP, f"not a KServe object: {obj['apiVersion']}"
    name = f"{version.capitalize()}{obj['kind']}"
    assert hasattr(kserve.models, name), f"KServe has no {obj['kind']} in {version}"
    return name


def problems(obj: Manifest) -> list[str]:
    return unknown_fields(obj, model_name(obj), resolve, enums=ENUMS, required=True)


def kserve_objects(objects: list[Manifest]) -> list[Manifest]:
    return [obj for obj in objects if obj["apiVersion"].startswith(f"{constants.KSERVE_GROUP}/")]


def test_every_enumerated_field_is_known() -> None:
    """The protocol check reaches the fields we write (a renamed model would drop it silently)."""
    assert {
        ("V1alpha1ServingRuntimeSpec", "protocolVersions"),
        ("V1beta1ModelSpec", "protocolVersion"),
    } <= set(ENUMS)
    assert {"v2", "grpc-v2"} <= PROTOCOLS


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda path: path.name)
def test_example_fits_kserve_models(path: Path) -> None:
    objects = load_all(path.read_text())
    assert kserve_objects(objects) == objects, "examples/kserve/ holds KServe objects only"
    for obj in objects:
        assert problems(obj) == [], f"{path.name}: {obj['kind']} {obj['metadata']['name']}"


def test_examples_cover_every_kind_we_ship() -> None:
    kinds = {obj["kind"] for path in EXAMPLES for obj in load_all(path.read_text())}
    assert kinds == {"ClusterServingRuntime", "ServingRuntime", "InferenceService"}


@pytest.mark.parametrize("cluster_scoped", [True, False], ids=["cluster", "namespaced"])
def test_chart_runtime_fits_kserve_models(tmp_path: Path, cluster_scoped: bool) -> None:
    """The chart's runtimes with every ``kserve.*`` value set, as helm renders them (the
    upstream one in front of a Triton predictor included)."""
    helm = Helm(require_tool("helm", "run scripts/get-helm"))
    values = {
        "enabled": True,
        "clusterScoped": cluster_scoped,
        "image": "registry.local/cachefleet:dev",
        "cacheMode": "tiered",
        "localCacheSize": "1Gi",
        "upstream": {
            "enabled": True,
            "name": "cachefleet-triton-front",
            "url": "grpc://{{.Name}}-triton-predictor.{{.Namespace}}:9000",
            "resources": {"requests": {"cpu": "500m"}},
        },
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"kserve": values}))
    runtimes = kserve_objects(helm.template(path))
    assert [r["metadata"]["name"] for r in runtimes] == ["cachefleet", "cachefleet-triton-front"]
    for runtime in runtimes:
        assert runtime["kind"] == ("ClusterServingRuntime" if cluster_scoped else "ServingRuntime")
        assert problems(runtime) == []


def guide_blocks() -> list[Manifest]:
    blocks = re.findall(r"^```yaml\n(.*?)^```", GUIDE.read_text(), flags=re.M | re.S)
    return [yaml.safe_load(block) for block in blocks]


def test_guide_yaml_fits_kserve_models() -> None:
    """Whole objects by their kind; fragments by where the guide says they go (a fragment leaves
    out what the object around it holds, so its required fields are not asked for)."""
    blocks = guide_blocks()
    assert [block.get("kind") for block in blocks] == ["InferenceService", None, "InferenceService"]
    for block in blocks:
        if "apiVersion" in block:
            assert problems(block) == []
            continue
        [key] = block
        assert key in FRAGMENTS, f"the guide's fragment under {key!r}: say where it goes"
        assert unknown_fields(block, FRAGMENTS[key], resolve, enums=ENUMS) == []


def test_guide_grpc_settings_fit_the_predictor_model() -> None:
    """The guide's inline gRPC settings (``protocolVersion``, ``ports``) on its example model."""
    text = GUIDE.read_text()
    settings = [
        yaml.safe_load(span)
        for span in re.findall(r"`((?:protocolVersion: grpc-v2|ports: \[)[^`]*)`", text)
    ]
    assert [next(iter(setting)) for setting in settings] == ["protocolVersion", "ports"]
    service = guide_blocks()[0]
    model = service["spec"]["predictor"]["model"]
    for setting in settings:
        model.update(setting)
    assert problems(service) == []


def test_a_misspelt_or_mistyped_kserve_field_fails() -> None:
    """What the walk catches at KServe's level, on the runtime we ship."""
    [runtime] = load_all(
        (REPO / "examples" / "kserve" / "cluster-serving-runtime.yaml").read_text()
    )
    spec = runtime["spec"]
    spec["multimodel"] = False  # KServe's field is multiModel
    spec["protocolVersions"] = ["v2", "grpc-v3"]
    onnx = spec["supportedModelFormats"][0]
    onnx["autoselect"] = onnx.pop("autoSelect")
    onnx["priority"] = "2"
    spec["annotations"]["prometheus.kserve.io/port"] = 8080
    assert sorted(problems(runtime)) == [
        ".spec.annotations.prometheus.kserve.io/port: str expected",
        ".spec.multimodel: not a field of V1alpha1ServingRuntimeSpec",
        f".spec.protocolVersions: 'grpc-v3' is not one of {sorted(PROTOCOLS)}",
        ".spec.supportedModelFormats[0].autoselect: not a field of V1alpha1SupportedModelFormat",
        ".spec.supportedModelFormats[0].priority: int expected",
    ]


def test_a_kind_kserve_does_not_have_fails() -> None:
    [runtime] = load_all((REPO / "examples" / "kserve" / "serving-runtime.yaml").read_text())
    runtime["apiVersion"] = "serving.kserve.io/v1beta1"  # ServingRuntime is v1alpha1 only
    with pytest.raises(AssertionError, match="KServe has no ServingRuntime in v1beta1"):
        problems(runtime)


def test_a_missing_required_field_fails() -> None:
    """Fields KServe's models (and the Kubernetes ones they embed) require, on the example."""
    [service] = load_all((REPO / "examples" / "kserve" / "inference-service.yaml").read_text())
    model = service["spec"]["predictor"]["model"]
    del model["modelFormat"]
    del model["env"][1]["valueFrom"]["secretKeyRef"]["key"]
    assert problems(service) == [
        ".spec.predictor.model.modelFormat: required by V1beta1ModelSpec, missing",
        ".spec.predictor.model.env[1].valueFrom.secretKeyRef.key: required by"
        " V1SecretKeySelector, missing",
    ]
