"""The previous release's operator reads what today's CRD stores, and no CRD default changes
silently.

The CRD is applied before the new operator (and ``helm rollback`` never downgrades it), so the
previous operator reads objects through today's CRD: the API server fills today's defaults into
every stored object, on write and on read. A default the previous operator does not know stalls
every service; a new or changed default changes existing services with no edit of theirs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.kube.crd_schema import CRD_PATH, apply_defaults, schema
from support.previous_release import ReleaseCheckout
from support.skew import ROOT, example_objects, render_with

pytestmark = pytest.mark.timeout(600)


def test_the_previous_operator_reads_objects_defaulted_by_todays_crd(
    previous_release: ReleaseCheckout, tmp_path: Path
) -> None:
    """Its own examples, as they come back from an API server that has today's CRD."""
    objects = example_objects(previous_release.root)
    own, defaulted = [], []
    for index, (_, body) in enumerate(objects):
        own.append(tmp_path / f"own-{index}.yaml")
        own[-1].write_text(yaml.safe_dump(body))
        defaulted.append(tmp_path / f"defaulted-{index}.yaml")
        defaulted[-1].write_text(yaml.safe_dump(apply_defaults(schema(), body)))
    rendered = render_with(previous_release, [*own, *defaulted])
    refused = {
        name: rendered[str(after)]
        for (name, _), before, after in zip(objects, own, defaulted, strict=True)
        # (its own test data of a broken object is refused either way)
        if isinstance(rendered[str(before)], list) and isinstance(rendered[str(after)], str)
    }
    assert len(refused) < len(objects)
    assert not refused, f"{previous_release.release.version}'s operator refuses: {refused}"


def crd_defaults(crd: dict[str, Any]) -> dict[str, Any]:
    """Every default of the CRD's schema by field path (``spec.cache.mode``; ``[]`` for items)."""
    found: dict[str, Any] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if "default" in node:
            found[path] = node["default"]
        for name, sub in node.get("properties", {}).items():
            walk(sub, f"{path}.{name}" if path else name)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]")

    for version in crd["spec"]["versions"]:
        walk(version["schema"]["openAPIV3Schema"], "")
    return found


def latest_changelog_entry() -> str:
    text = (ROOT / "CHANGELOG.md").read_text()
    [latest, *_] = re.split(r"^## (?=\d)", text, flags=re.MULTILINE)[1:]
    return latest


def test_every_crd_default_that_changed_since_the_previous_release_is_in_the_changelog(
    previous_release: ReleaseCheckout,
) -> None:
    """A default reaches every existing object on read: adding, changing or removing one
    changes running services, so the release notes must name it (the field path)."""
    before = crd_defaults(
        yaml.safe_load((previous_release.root / "crds" / CRD_PATH.name).read_text())
    )
    after = crd_defaults(yaml.safe_load(CRD_PATH.read_text()))
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    notes = latest_changelog_entry()
    unnamed = [path for path in changed if path not in notes]
    assert not unnamed, (
        f"CRD defaults changed since {previous_release.release.version} and not named in "
        f"CHANGELOG.md's latest entry: "
        + "; ".join(
            f"{p}: {before.get(p, '(none)')!r} -> {after.get(p, '(none)')!r}" for p in unnamed
        )
    )
