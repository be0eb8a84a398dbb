"""An upgrade from the previous release on a real control plane, and its rollback.

The previous release (``releases.toml``, checked out and installed by
``support.previous_release``) is installed with its own CRD and chart (``helm install``) and
its own operator code runs a service with a managed Redis until it is Ready. Then today's CRD
is applied and today's chart upgrades the release (``helm upgrade``), and today's operator takes
over: the service must be Ready again, no Redis pod replaced (a Redis restart empties the
cache) and the runtime Deployment changed only where the CHANGELOG says (its image moves to
this release's). The Redis template does change in one place, the password's delivery (off
``redis-server``'s command line), under the ``OnDelete`` strategy: a Redis pod deleted comes
back in the new form, and a spec change that needs a restart still rolls its Redis
(``reconcile/redis_restarts.py``). ``helm rollback`` and the old operator again: it must still
read what today's wrote (Ready, no error in its log).

Every operator runs as a process under a token of the chart's ServiceAccount, as
``support.cluster_operator`` runs today's; kwok runs no container, so a loopback redis-server
stands in for the managed Redis pod (it takes the password the operator generated).
"""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from support.cluster_operator import give_password, redis_password, service_account_token
from support.plane import ROOT, Plane, until
from support.previous_release import ReleaseCheckout, checkout_previous_release, current_version
from support.processes import CACHEFLEET, ManagedProcess, RedisProcess

from cachefleet.operator.manifests.redis import password_on_command_line

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
RELEASE = "upgrade"
OPERATOR_NAMESPACE = "upgrade-system"
ACCOUNT = f"{RELEASE}-cachefleet-operator"
NAMESPACE = "upgraded"
NAME = "quickstart"
#: A second service with a managed Redis, whose pod the tests leave alone until a spec change.
OTHER = "second"
NAMES = (NAME, OTHER)
#: Today's operator resyncs every service this often here, so that what a reconcile decides
#: from the pods (a Redis pod replaced) shows within seconds.
RESYNC_S = "5"
CRD = "crd/cachedinferenceservices.cachefleet.io"
T = TypeVar("T")


@dataclass
class Story:
    """What the module's tests share: the plane, the old checkout, the templates recorded
    under the previous release and the operator process running now."""

    plane: Plane
    old: ReleaseCheckout
    redis: RedisProcess
    folder: Path
    #: Each service's Redis pod template and Redis pod uid under the previous release.
    redis_templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    redis_pods: dict[str, str] = field(default_factory=dict)
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
            env = {**self.plane.env(), **settings, "CACHEFLEET_OPERATOR_RESYNC_INTERVAL": RESYNC_S}
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
        self.until_found(check, what)

    def until_found(self, check: Callable[[], T], what: str) -> T:
        """``until``'s result, with a generous deadline, failing with the operator's log."""
        try:
            return until(check, what, timeout_s=300)
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
    plane.established(CRD)


def _service(old: ReleaseCheckout, name: str) -> dict[str, Any]:
    """The old checkout's quickstart, with a managed Redis (the default mode, with a password)
    in place of the in-process cache, so that there is a Redis StatefulSet the upgrade must leave
    alone."""
    service: dict[str, Any] = yaml.safe_load(
        (old.root / "examples" / "quickstart.yaml").read_text()
    )
    service["metadata"].update(name=name, namespace=NAMESPACE)
    service["spec"]["cache"] = {"mode": "redis", "ttl": "10m"}
    return service


def _redis_statefulset(plane: Plane, name: str = NAME) -> dict[str, Any]:
    statefulset: dict[str, Any] = plane.get(f"statefulset/{name}-redis", "-n", NAMESPACE)
    return statefulset


def _redis_pod(plane: Plane, name: str) -> dict[str, Any] | None:
    """The Redis pod of service ``name`` when it runs (Running and not being deleted)."""
    pods = plane.get(
        "pods",
        "-n",
        NAMESPACE,
        "-l",
        f"app.kubernetes.io/instance={name},app.kubernetes.io/component=redis",
    )
    running = [p for p in pods["items"] if p["status"].get("phase") == "Running"
               and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    return running[0] if len(running) == 1 else None


def _redis_container(pod_or_template: dict[str, Any]) -> dict[str, Any]:
    found: list[dict[str, Any]] = pod_or_template["spec"]["containers"]
    [redis] = [c for c in found if c["name"] == "redis"]
    return redis


def _strategy(plane: Plane, name: str) -> str:
    return str(_redis_statefulset(plane, name)["spec"]["updateStrategy"]["type"])


def _settled(plane: Plane, name: str, strategy: str) -> bool:
    """Whether the Redis StatefulSet of ``name`` has the update ``strategy`` and its controller
    has seen its latest spec."""
    statefulset = _redis_statefulset(plane, name)
    observed = statefulset.get("status", {}).get("observedGeneration")
    return bool(
        statefulset["spec"]["updateStrategy"]["type"] == strategy
        and observed == statefulset["metadata"]["generation"]
    )


def _has_template(plane: Plane, name: str, template: dict[str, Any]) -> bool:
    return bool(_redis_statefulset(plane, name)["spec"]["template"] == template)


def _runtime_template(plane: Plane) -> dict[str, Any]:
    template: dict[str, Any] = plane.get(f"deployment/{NAME}", "-n", NAMESPACE)["spec"]["template"]
    return template


def _ready(story: Story, what: str, name: str = NAME) -> None:
    def ready() -> bool:
        service = story.plane.get(f"cis/{name}", "-n", NAMESPACE)
        status = service.get("status", {})
        observed = status.get("observedGeneration") == service["metadata"]["generation"]
        return observed and story.plane.condition(f"cis/{name}", NAMESPACE, "Ready") == "True"

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
    plane.apply([_service(old, name) for name in NAMES])
    for name in NAMES:
        password = until(
            partial(redis_password, plane, NAMESPACE, name), f"{name}'s Redis password"
        )
        assert password is not None
        if name == NAME:
            give_password(stand_in_redis, password)
        else:  # the one stand-in takes each service's password
            stand_in_redis.command("ACL", "SETUSER", "default", "on", f">{password}")
    for name in NAMES:
        _ready(told, f"{name} Ready under {old.release.version}'s operator", name)
        told.redis_templates[name] = _redis_statefulset(plane, name)["spec"]["template"]
        pod = until(partial(_redis_pod, plane, name), f"{name}'s Redis pod Running")
        assert pod is not None
        told.redis_pods[name] = pod["metadata"]["uid"]
        assert password_on_command_line(_redis_container(pod))  # the previous release's form
    told.runtime_template = _runtime_template(plane)
    try:
        yield told
    finally:
        told.stop_operator()  # (its namespaces are deleted at the module's end)
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

    for name in NAMES:
        # The new template waits for the pod's own restart: OnDelete, seen by the controller.
        story.until(partial(_settled, plane, name, "OnDelete"),
                    f"{name}'s Redis StatefulSet OnDelete")  # fmt: skip
        template = _redis_statefulset(plane, name)["spec"]["template"]
        assert not password_on_command_line(_redis_container(template))
        old_template = copy.deepcopy(story.redis_templates[name])
        _redis_container(old_template)["command"] = _redis_container(template)["command"]
        assert template == old_template  # the password's delivery is all that changed
        pod = _redis_pod(plane, name)
        assert pod is not None
        assert pod["metadata"]["uid"] == story.redis_pods[name]
        assert password_on_command_line(_redis_container(pod))  # untouched: not restarted
    events = plane.get("events", "-n", NAMESPACE, "--field-selector",
                       f"involvedObject.name={OTHER},reason=RestartDeferred")["items"]  # fmt: skip
    assert events, "no RestartDeferred event on the service"
    # The runtime's pod template changes in its image only: the CHANGELOG names no other change
    # to what the operator renders for this service.
    (old_image,) = _runtime_images(story.runtime_template)
    assert old_image != new_image
    upgraded = _without_images(_runtime_template(plane), old_image, new_image)
    assert upgraded == story.runtime_template


def test_a_redis_pod_replaced_comes_back_without_the_password_on_its_command_line(
    story: Story,
) -> None:
    """Deleted (as an eviction or a lost node would), the pod is made from the new revision;
    the StatefulSet then goes back to RollingUpdate, which restarts nothing more."""
    plane = story.plane
    old = story.redis_pods[NAME]
    plane.kubectl("delete", "pod", f"{NAME}-redis-0", "-n", NAMESPACE, "--wait=false")

    def replaced() -> dict[str, Any] | None:
        pod = _redis_pod(plane, NAME)
        return pod if pod is not None and pod["metadata"]["uid"] != old else None

    story.until(replaced, f"{NAME}'s Redis pod replaced")
    pod = replaced()
    assert pod is not None
    redis = _redis_container(pod)
    assert not password_on_command_line(redis)
    assert 'requirepass "$hex"' in redis["command"][-1]  # on Redis's standard input
    assert "requirepass" not in " ".join(redis.get("args") or [])
    story.until(partial(_settled, plane, NAME, "RollingUpdate"),
                f"{NAME}'s Redis StatefulSet back on RollingUpdate")  # fmt: skip
    _ready(story, f"{NAME} Ready with its new Redis pod")
    after = _redis_pod(plane, NAME)
    assert after is not None
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]
    story.redis_pods[NAME] = pod["metadata"]["uid"]


def test_a_spec_change_that_needs_a_restart_still_rolls_a_waiting_redis(story: Story) -> None:
    """The other service's Redis still waits (OnDelete); a new Redis image must roll it all
    the same, and the new pod has the new form. The spec is put back afterwards (rolling it
    again) for the rollback test."""
    plane = story.plane
    assert _strategy(plane, OTHER) == "OnDelete"
    old = story.redis_pods[OTHER]
    image = _redis_container(story.redis_templates[OTHER])["image"]
    changed = f"{image.split(':')[0]}:7.4.1-alpine"
    assert changed != image

    def patch(to: str) -> None:
        body = {"spec": {"cache": {"redis": {"image": to}}}}
        plane.kubectl("patch", f"cis/{OTHER}", "-n", NAMESPACE, "--type=merge",
                      "-p", json.dumps(body))  # fmt: skip

    def rolled_to(wanted: str, before: str) -> dict[str, Any] | None:
        pod = _redis_pod(plane, OTHER)
        if pod is None or pod["metadata"]["uid"] == before:
            return None
        return pod if _redis_container(pod)["image"] == wanted else None

    patch(changed)
    pod = story.until_found(lambda: rolled_to(changed, old), f"{OTHER}'s Redis rolled")
    assert pod is not None
    assert not password_on_command_line(_redis_container(pod))
    assert _strategy(plane, OTHER) == "RollingUpdate"
    _ready(story, f"{OTHER} Ready on its new Redis image", OTHER)
    patch(image)
    story.until_found(lambda: rolled_to(image, pod["metadata"]["uid"]),
                      f"{OTHER}'s Redis rolled back to {image}")  # fmt: skip
    _ready(story, f"{OTHER} Ready on its first Redis image", OTHER)


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
    for name in NAMES:
        # The previous release's form again, applied with the default RollingUpdate.
        story.until(partial(_has_template, plane, name, story.redis_templates[name]),
                    f"{name}'s Redis template back")  # fmt: skip
        assert _strategy(plane, name) == "RollingUpdate"
    log = process.log_tail(1_000_000)
    errors = [line for line in log.splitlines() if _an_error_of_this_story(line)]
    assert errors == [], log[-3000:]


#: kopf names the object a log line is about as ``[namespace/name]``.
_OBJECT = re.compile(r"\[([a-z0-9-]+)/([a-z0-9.-]+)\]")


def _an_error_of_this_story(line: str) -> bool:
    """An error line about this module's service or the operator as a whole. Every other
    module deletes its services at its end (``nothing_left_behind``), but the operator watches
    every namespace, against the one stand-in Redis whose password is this module's: an error
    about another object is not the upgrade's."""
    if "ERROR" not in line and "Traceback" not in line:
        return False
    about = _OBJECT.search(line)
    return about is None or about.groups() == (NAMESPACE, NAME)
