"""The README's install on a real control plane: the CRD and ``deploy/`` applied with kubectl,
the operator under ``deploy/``'s ServiceAccount, an example reaching Ready on kwok's nodes, the
server's own schema and CEL refusals, and the children collected by the real garbage collector.
"""

from __future__ import annotations

import json

import pytest
import yaml
from support.cluster_operator import OperatorProcess
from support.plane import ROOT, SERVICES, Plane, until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _namespace(plane: Plane, name: str) -> str:
    plane.kubectl("create", "namespace", name)
    return name


def test_deploy_installs_the_operator_deployment(installed: Plane) -> None:
    deployment = installed.get("deployment/cachefleet-operator", "-n", "cachefleet-system")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "cachefleet-operator"
    crd = installed.get(f"crd/{SERVICES}")
    assert crd["status"]["acceptedNames"]["kind"] == "CachedInferenceService"
    # The RBAC deploy/ grants, as the server evaluates it for the operator's ServiceAccount.
    account = "system:serviceaccount:cachefleet-system:cachefleet-operator"
    can = installed.kubectl("auth", "can-i", "patch", "deployments.apps", "-n", "default",
                            "--as", account, check=False)  # fmt: skip
    assert can.stdout.strip() == "yes", can.stderr


def test_quickstart_is_ready_and_collected_on_delete(
    operator: OperatorProcess, installed: Plane
) -> None:
    """The quickstart's pod is scheduled on a kwok node and Running there; the service turns
    Ready; deleting it leaves its Deployment to the garbage collector, which removes it."""
    namespace = _namespace(installed, "quickstart")
    installed.kubectl("apply", "-n", namespace, "-f", str(ROOT / "examples" / "quickstart.yaml"))
    until(lambda: installed.condition("cis/quickstart", namespace, "Ready") == "True",
          f"quickstart Ready\n{operator.log[-3000:]}", timeout_s=240)  # fmt: skip
    pods = installed.get("pods", "-n", namespace)["items"]
    assert pods
    assert all(pod["spec"].get("nodeName", "").startswith("kwok-") for pod in pods)
    deployment = installed.get("deployment/quickstart", "-n", namespace)
    owner = deployment["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner.get("controller")) == (
        "CachedInferenceService", "quickstart", True)  # fmt: skip

    installed.kubectl("delete", "cis/quickstart", "-n", namespace, "--wait=true")

    def collected() -> bool:
        left = installed.kubectl("get", "deployments,replicasets,pods,services", "-n", namespace,
                                 "-o", "name").stdout.split()  # fmt: skip
        return not left

    until(collected, "the quickstart's children collected by the garbage collector")


def test_invalid_spec_is_refused_by_the_server_with_the_crd_message(installed: Plane) -> None:
    """The CRD's CEL rule, evaluated by the API server: both or neither of storageUri and
    repository is refused at apply, with the CRD's own message."""
    service = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    service["metadata"]["name"] = "both-sources"
    service["spec"]["model"]["storageUri"] = "s3://bucket/models"
    refused = installed.kubectl("apply", "--server-side", "-n", "default", "-f", "-",
                                stdin=json.dumps(service), check=False)  # fmt: skip
    assert refused.returncode != 0
    assert "set exactly one of model.storageUri or model.repository" in refused.stderr
    assert "is invalid" in refused.stderr
    gone = installed.kubectl("get", "cis/both-sources", "-n", "default", check=False)
    assert gone.returncode != 0
    assert "NotFound" in gone.stderr


def test_unknown_field_is_refused_by_kubectl_and_pruned_with_the_servers_warning(
    installed: Plane,
) -> None:
    """kubectl's default (strict field validation) has the server refuse a CR with a field the
    schema does not know; with ``--validate=warn`` it is pruned, with the server's warning."""
    service = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    service["metadata"]["name"] = "unknown-field"
    service["spec"]["cache"]["mdoe"] = "local"
    text = json.dumps(service)
    refused = installed.kubectl("apply", "-n", "default", "-f", "-", stdin=text, check=False)
    assert refused.returncode != 0
    assert 'strict decoding error: unknown field "spec.cache.mdoe"' in refused.stderr
    done = installed.kubectl("apply", "--validate=warn", "-n", "default", "-f", "-", stdin=text)
    assert 'unknown field "spec.cache.mdoe"' in done.stderr
    stored = installed.get("cis/unknown-field", "-n", "default")
    assert "mdoe" not in stored["spec"]["cache"]
