"""A release is one version everywhere: pyproject.toml, the operator, the chart, the CHANGELOG,
``cachefleet --version``; and every recorded release has its CHANGELOG entry."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from support.previous_release import current_version, recorded_releases
from support.processes import CACHEFLEET

from cachefleet.operator.manifests.release import RELEASE_RUNTIME_IMAGE, VERSION

ROOT = Path(__file__).resolve().parents[1]
#: A release heading of CHANGELOG.md: ``## 0.2.0`` (anything after the version is free text).
HEADING = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.MULTILINE)


def changelog_versions() -> list[str]:
    return HEADING.findall((ROOT / "CHANGELOG.md").read_text())


def test_pyproject_the_operator_the_chart_and_the_changelog_name_one_version() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "cachefleet" / "Chart.yaml").read_text())
    version = current_version(ROOT)
    assert version == VERSION == chart["version"] == chart["appVersion"]
    assert changelog_versions()[0] == version, "CHANGELOG.md's latest entry is the version"
    assert RELEASE_RUNTIME_IMAGE.endswith(f":{version}")


def test_the_quickstart_copies_the_samples_out_of_this_releases_runtime_image() -> None:
    """The quickstart names the runtime image by tag: a release that moves the version and not
    the example would start new users on the previous runtime (or on an image not yet built)."""
    service = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    source = service["spec"]["model"]["repository"]["image"]
    assert source["image"] == RELEASE_RUNTIME_IMAGE
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert f"samples {source['path']} --model {service['spec']['model']['name']}" in dockerfile


def test_every_recorded_release_has_a_changelog_entry_and_a_full_commit() -> None:
    entries = changelog_versions()
    assert entries == sorted(entries, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    releases = recorded_releases(ROOT)
    assert releases, "releases.toml records no release"
    for release in releases:
        assert release.version in entries, f"{release.version} has no CHANGELOG.md entry"
        assert re.fullmatch(r"[0-9a-f]{40}", release.commit), release
    versions = [r.version for r in releases]
    assert len(set(versions)) == len(versions)
    assert current_version(ROOT) not in versions[:-1], "the current version is not an old release"


def test_cachefleet_version_prints_the_release() -> None:
    done = subprocess.run([*CACHEFLEET, "--version"], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout.strip()) == (0, f"cachefleet {current_version(ROOT)}")


def test_bare_cachefleet_lists_the_commands_without_a_traceback() -> None:
    done = subprocess.run(CACHEFLEET, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "render" in done.stderr
    assert "--version" in done.stderr
