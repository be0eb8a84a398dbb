"""What an operator upgrade rolls: the previous release's rendering of each example against today's.

Today's operator takes over the objects the previous one applied. Whatever differs in a pod
template rolls those pods, so each example is rendered by both releases' own ``cachefleet
render`` (the previous one from its checkout) and the pod templates compared: the Redis pods must
not change at all (a restart empties the cache) but for the one change the operator defers to
each Redis pod's own next restart (the password's delivery: ``reconcile/redis_restarts.py``,
which needs the previous form rendered exactly), and every difference in the runtime pods must
be one this release means (listed in ``RUNTIME_CHANGES`` with the reason).

Both renderings read the example as the API server stored it under the previous release's CRD
(its defaults applied), and get the same stand-in for the generated secrets, whose digests go
into the pod templates (``render`` draws new ones on every run).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube.crd_schema import EXAMPLES, apply_defaults
from support.previous_release import ReleaseCheckout
from support.skew import NEW_EXAMPLES

from cachefleet.operator.manifests.redis import (
    password_on_command_line,
    with_password_on_command_line,
)

CRD = Path("crds") / "cachedinferenceservices.cachefleet.io.yaml"
#: The examples an upgrade takes over: those of services the previous release could run.
UPGRADED = [e for e in EXAMPLES if e.name not in NEW_EXAMPLES]
#: ``cachefleet render FILE`` with a fixed stand-in for the generated password, cache secret and
#: admin token, so that two renderings differ only where the releases do: the previous release
#: drew them from ``secrets.token_urlsafe``; today's renders the digests of
#: ``render_command.GENERATED``, which the stand-in equals.
RENDER = """
import secrets, sys
secrets.token_urlsafe = lambda nbytes=None: "generated-by-the-operator"
from cachefleet.cli.main import main
sys.exit(main(["render", sys.argv[1]]))
"""
#: Every place the runtime pod template of an example may differ after the upgrade from the
#: previous release (0.2.0 -> 0.3.0), and why. (0.1.0 -> 0.2.0 also renamed the settings
#: ConfigMap by its content, bounded the download and requested the model volume's node disk.)
RUNTIME_CHANGES = {
    # Services that name no image run the operator's own release's runtime.
    "spec.containers[server].image": "the runtime image of the new release",
    # The model-fetch init container runs the server image too (spec.model.storageUri).
    "spec.initContainers[fetch-model].image": "the runtime image of the new release",
}


def stored(example: Path, crd: Path) -> dict[str, Any]:
    """The example as the API server stores it: ``crd``'s defaults applied."""
    schema = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return dict(apply_defaults(schema, yaml.safe_load(example.read_text())))


def rendered(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def template(children: list[dict[str, Any]], kind: str) -> dict[str, Any] | None:
    found = [c for c in children if c["kind"] == kind]
    return found[0]["spec"]["template"] if found else None


def differences(old: Any, new: Any, path: str = "") -> Iterator[str]:
    """Paths where ``old`` and ``new`` differ; list items that have a name go by it."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            yield from differences(old.get(key), new.get(key), f"{path}.{key}" if path else key)
    elif isinstance(old, list) and isinstance(new, list) and _named(old) and _named(new):
        old_items, new_items = {i["name"]: i for i in old}, {i["name"]: i for i in new}
        if list(old_items) != list(new_items):
            yield f"{path} (items {list(old_items)} -> {list(new_items)})"
        for name in old_items.keys() & new_items.keys():
            yield from differences(old_items[name], new_items[name], f"{path}[{name}]")
    elif old != new:
        yield path


def _named(items: list[Any]) -> bool:
    return all(isinstance(i, dict) and "name" in i for i in items)


@pytest.fixture(scope="module")
def renderings(
    previous_release: ReleaseCheckout, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """(previous release's children, today's) of every example."""
    folder = tmp_path_factory.mktemp("stored")
    found = {}
    for example in UPGRADED:
        path = folder / example.name
        path.write_text(yaml.safe_dump(stored(example, previous_release.root / CRD)))
        old = rendered(previous_release.run_python(RENDER, str(path)))
        new = rendered(
            subprocess.run(
                [sys.executable, "-c", RENDER, str(path)],
                capture_output=True,
                text=True,
                check=False,
            )
        )
        found[example.name] = (old, new)
    return found


@pytest.mark.parametrize("example", [e.name for e in UPGRADED])
def test_an_operator_upgrade_restarts_no_redis(
    renderings: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], example: str
) -> None:
    """Today's Redis template, in the form the operator compares with a previous release's live
    StatefulSet, is the previous release's own: so the operator sees that only the password's
    delivery differs, and leaves that change to the pod's own restart (``OnDelete``)."""
    old, new = renderings[example]
    statefulsets = [c for c in new if c["kind"] == "StatefulSet"]
    compared = [with_password_on_command_line(c) for c in statefulsets]
    assert template(compared, "StatefulSet") == template(old, "StatefulSet")
    for statefulset in statefulsets:  # what is applied no longer has it
        [redis] = statefulset["spec"]["template"]["spec"]["containers"]
        assert not password_on_command_line(redis)


@pytest.mark.parametrize("example", [e.name for e in UPGRADED])
def test_the_runtime_pods_change_only_where_this_release_means_them_to(
    renderings: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]], example: str
) -> None:
    old, new = renderings[example]
    changed = set(differences(template(old, "Deployment"), template(new, "Deployment")))
    assert changed <= RUNTIME_CHANGES.keys(), sorted(changed - RUNTIME_CHANGES.keys())
    # A fleet that names no runtime image follows the operator's release (and rolls once); one
    # that names its image does not roll at all.
    service = yaml.safe_load(next(e for e in EXAMPLES if e.name == example).read_text())
    names_image = "image" in (service["spec"].get("runtime") or {})
    assert ("spec.containers[server].image" in changed) != names_image


def test_the_examples_left_out_are_new_in_this_release(previous_release: ReleaseCheckout) -> None:
    """NEW_EXAMPLES holds only examples the previous release did not ship."""
    shipped = {p.name for p in (previous_release.root / "examples").glob("*.yaml")}
    assert not shipped & NEW_EXAMPLES.keys()
    assert NEW_EXAMPLES.keys() <= {e.name for e in EXAMPLES}
