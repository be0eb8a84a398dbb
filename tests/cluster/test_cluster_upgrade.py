"""An upgrade from the previous release on a real control plane, and its rollback.

The previous release (``releases.toml``, checked out and installed by
``support.previous_release``) is installed with its own CRD and chart (``helm install``) and
its own operator code runs a service with a managed Redis until it is Ready. Then today's CRD
is applied and today's chart upgrades the release (``helm upgrade``), and today's operator takes
over: the service must be Ready again, the Redis StatefulSet's pod template unchanged (a Redis
restart empties the cache) and the runtime Deployment changed only where the CHANGELOG says
(its image moves to this release's). ``helm rollback`` and the old operator again: it must still
read what today's wrote (Ready, no error in its log).

Every operator runs as a process under a token of the chart's ServiceAccount, as
``support.cluster_operator`` runs today's; kwok runs no container, so a loopback redis-server
stands in for the managed Redis pod (it takes the password the operator generated).
"""

from __future__ import annotations

import base64
import copy
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cluster_operator import give_password, service_account_token
from support.plane import ROOT, Plane, until
from support.previous_release import ReleaseCheckout, checkout_previous_release, current_version
from support.processes import CACHEFLEET, ManagedProcess, RedisProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RELEASE = "upgrade"
OPERATOR_NAMESPACE = "upgrade-system"
ACCOUNT = f"{RELEASE}-cachefleet-operator"
NAMESPACE = "upgraded"
NAME = "quickstart"
CRD = "crd/cachedinferenceservices.cachefleet.io"


@dataclass
class Story:
    """What the module's tests share: the plane, the old checkout, the templates recorded
    under the previous release and the operator process running now."""

    plane: Plane
    old: ReleaseCheckout
    redis: RedisProcess
    folder: Path
    redis_template: dict[str, Any] = field(default_factory=dict)
    runtime_template: dict[str, Any] = field(default_factory=dict)
    running: ManagedProcess | None = None

    def start_operator(self, name: str, *, old: bool) -> ManagedProcess:
        """An operator of the old checkout or of today's tree, with the chart's command and a
        token of the chart's ServiceAccount."""
        self.stop_operator()
        token = service_account_token(self.plane, ACCOUNT, OPERATOR_NAMESPACE)
        kubeconfig = self.plane.token_kubeconfig(self.folder / f"{name}.kubeconfig", token)
        redis = f"127.0.0.1:{self.redis.port}"
        settings = {"KUBECONFIG": str(kubeconfig), "POD_ID": name,
                    "CACHEFLEET_OPERATOR_NAMESPACE": OPERATOR_NAMESPACE,
                    "CACHEFLEET_OPERATOR_REDIS_ADDRESS": redis}  # fmt: skip
        flags = ["operator", "-v", "--standalone", "--all-namespaces"]
        if old:
            command, env = [str(self.old.cachefleet), *flags], self.old.env(settings)
        else:
            command = [*CACHEFLEET, *flags]
            env = {**self.plane.env(), **settings}
        self.running = ManagedProcess(name, command, self.folder / f"{name}.log", env)
        return self.running

    def stop_operator(self) -> None:
        if self.running is not None:
            self.running.stop()
            self.running = None

    def log(self) -> str:
        return self.running.log_tail() if self.running else ""

    def until(self, check: Callable[[], object], what: str) -> None:
        """``until`` with a generous deadline, failing with the running operator's log."""
        try:
            until(check, what, timeout_s=300)
        except AssertionError as failed:
            raise AssertionError(f"{failed}\noperator log:\n{self.log()}") from None


def _helm(plane: Plane, *args: str) -> None:
    helm = str(ROOT / ".cache" / "tools" / "bin" / "helm")
    done = subprocess.run([helm, *args, "-n", OPERATOR_NAMESPACE], env=plane.env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, f"helm {' '.join(args)}:\n{done.stderr}"


def _apply_crd(plane: Plane, root: Path) -> None:
    """The CRD of the checkout at ``root``, as the upgrade guide applies it."""
    plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(root / "crds"))
    plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", CRD)


def _service(old: ReleaseCheckout) -> dict[str, Any]:
    """The old checkout's quickstart, with a managed Redis (the default mode) in place of the
    in-process cache, so that there is a Redis StatefulSet the upgrade must leave alone."""
    service: dict[str, Any] = yaml.safe_load(
        (old.root / "examples" / "quickstart.yaml").read_text()
    )
    service["metadata"]["namespace"] = NAMESPACE
    service["spec"]["cache"] = {"mode": "redis", "ttl": "10m"}
    return service


def _redis_password(plane: Plane) -> str | None:
    for secret in plane.get("secrets", "-n", NAMESPACE)["items"]:
        data = secret.get("data", {})
        if secret["metadata"]["name"].endswith("redis-auth") and "password" in data:
            return base64.b64decode(data["password"]).decode()
    return None


def _redis_statefulset(plane: Plane) -> dict[str, Any]:
    found = plane.get("statefulsets", "-n", NAMESPACE)["items"]
    assert len(found) == 1, [item["metadata"]["name"] for item in found]
    statefulset: dict[str, Any] = found[0]
    return statefulset


def _runtime_template(plane: Plane) -> dict[str, Any]:
    template: dict[str, Any] = plane.get(f"deployment/{NAME}", "-n", NAMESPACE)["spec"]["template"]
    return template


def _ready(story: Story, what: str) -> None:
    def ready() -> bool:
        service = story.plane.get(f"cis/{NAME}", "-n", NAMESPACE)
        status = service.get("status", {})
        observed = status.get("observedGeneration") == service["metadata"]["generation"]
        return observed and story.plane.condition(f"cis/{NAME}", NAMESPACE, "Ready") == "True"

    story.until(ready, what)


def _runtime_images(template: dict[str, Any]) -> set[str]:
    """The image of the runtime's container ("server"; the init containers' are the spec's)."""
    return {c["image"] for c in template["spec"]["containers"] if c["name"] == "server"}


def _without_images(template: dict[str, Any], old_image: str, new_image: str) -> dict[str, Any]:
    """``template`` with every mention of the new runtime image read as the old one."""
    text = yaml.safe_dump(copy.deepcopy(template)).replace(new_image, old_image)
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


@pytest.fixture(scope="module")
def story(
    plane: Plane,
    stand_in_redis: RedisProcess,
    tmp_path_factory: pytest.TempPathFactory,
    session_operator_paused: None,
) -> Iterator[Story]:
    """The previous release installed, its operator running, the service Ready under it."""
    old = checkout_previous_release()
    told = Story(plane, old, stand_in_redis, tmp_path_factory.mktemp("upgrade"))
    _apply_crd(plane, old.root)
    _helm(plane, "install", RELEASE, str(old.root / "charts" / "cachefleet"), "--create-namespace")
    plane.kubectl("create", "namespace", NAMESPACE)
    told.start_operator("old-operator", old=True)
    plane.apply([_service(old)])
    password = until(lambda: _redis_password(plane), "the managed Redis's password Secret")
    assert password is not None
    give_password(stand_in_redis, password)
    _ready(told, f"{NAME} Ready under {old.release.version}'s operator")
    told.redis_template = _redis_statefulset(plane)["spec"]["template"]
    told.runtime_template = _runtime_template(plane)
    try:
        yield told
    finally:
        told.stop_operator()
        plane.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
        subprocess.run([str(ROOT / ".cache" / "tools" / "bin" / "helm"), "uninstall", RELEASE,
                        "-n", OPERATOR_NAMESPACE], env=plane.env(), capture_output=True,
                       timeout=300, check=False)  # fmt: skip
        _apply_crd(plane, ROOT)  # the session's other tests run on today's CRD


def test_upgrade_keeps_redis_and_moves_the_runtime_image(story: Story) -> None:
    plane = story.plane
    story.stop_operator()
    _apply_crd(plane, ROOT)
    _helm(plane, "upgrade", RELEASE, str(ROOT / "charts" / "cachefleet"))
    story.start_operator("operator", old=False)
    new_image = f"ghcr.io/cachefleet/cachefleet:{current_version()}"
    story.until(lambda: _runtime_images(_runtime_template(plane)) == {new_image},
                f"the runtime Deployment on {new_image}")  # fmt: skip
    _ready(story, f"{NAME} Ready again under today's operator")

    assert _redis_statefulset(plane)["spec"]["template"] == story.redis_template
    # The runtime's pod template changes in its image only: the CHANGELOG names no other change
    # to what the operator renders for this service.
    (old_image,) = _runtime_images(story.runtime_template)
    assert old_image != new_image
    upgraded = _without_images(_runtime_template(plane), old_image, new_image)
    assert upgraded == story.runtime_template


def test_rollback_is_read_by_the_previous_operator(story: Story) -> None:
    """The old operator reads the service today's wrote: it puts the runtime back on its own
    image (so it handled the service), Ready, the Redis pod template still the one it made."""
    plane = story.plane
    story.stop_operator()
    _helm(plane, "rollback", RELEASE, "1")
    process = story.start_operator("old-operator-again", old=True)
    (old_image,) = _runtime_images(story.runtime_template)
    story.until(lambda: _runtime_images(_runtime_template(plane)) == {old_image},
                f"the runtime Deployment back on {old_image}")  # fmt: skip
    _ready(story, f"{NAME} Ready under {story.old.release.version}'s operator after the rollback")
    assert _runtime_template(plane) == story.runtime_template
    assert _redis_statefulset(plane)["spec"]["template"] == story.redis_template
    log = process.log_tail(1_000_000)
    errors = [line for line in log.splitlines() if "ERROR" in line or "Traceback" in line]
    assert errors == [], log[-3000:]
