"""What the version-skew tests feed both releases: the example objects, and the runtime
invocations (command line, environment, config file) an operator's rendered objects make.

A runtime pod runs what the operator rendered: its container's ``cachefleet ...`` command line,
its environment (``CACHEFLEET_*``; Secret values stand in for ``valueFrom``, ``$(VAR)`` expanded
as the kubelet does) and the ConfigMap mounted where ``--config`` points. These are rebuilt here
from rendered objects and handed to ``support/settings_probe.py``, run with the Python of the
release under test, which parses and loads them with that release's own code.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from support.previous_release import ReleaseCheckout

ROOT = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).resolve().with_name("settings_probe.py")
KIND = "CachedInferenceService"
#: What a Secret key holds in a pod, for the loaders (long enough for a cache MAC secret).
SECRET_STAND_IN = "s" * 40
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
#: Examples of a kind of service this release adds and the previous one cannot run at all:
#: no such object predates an upgrade, and no runtime pod of the previous release serves it (a
#: fleet that pins an older ``runtime.image`` cannot use them). Left out of the skew checks,
#: each with its reason; an entry expires by itself once the previous release ships the example
#: (``test_upgrade_rendering`` checks it does not).
NEW_EXAMPLES = {
    "triton-upstream.yaml": "spec.server (the runtime's upstream mode) is new in this release",
    "external-upstream.yaml": "spec.server (the runtime's upstream mode) is new in this release",
}


def example_objects(root: Path = ROOT) -> list[tuple[str, dict[str, Any]]]:
    """Every CachedInferenceService under ``root``/examples (the GitOps test data too), as a
    user applies it, named by file (and position in a multi-document file)."""
    found = []
    for path in sorted((root / "examples").rglob("*.yaml")):
        documents = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
        objects = [
            d for d in documents if d.get("kind") == KIND and isinstance(d.get("spec"), dict)
        ]
        for index, body in enumerate(objects):
            name = str(path.relative_to(root / "examples"))
            found.append((name if len(objects) == 1 else f"{name}#{index}", _applyable(body)))
    return found


def _applyable(body: dict[str, Any]) -> dict[str, Any]:
    """The object as a user applies it: no status, a namespace."""
    meta = {"namespace": "default", **body["metadata"]}
    meta = {k: v for k, v in meta.items() if k in ("name", "namespace", "labels", "annotations")}
    return {"apiVersion": body["apiVersion"], "kind": KIND, "metadata": meta, "spec": body["spec"]}


def runtime_invocations(
    name: str, children: Sequence[dict[str, Any]], workdir: Path
) -> list[dict[str, Any]]:
    """Each ``cachefleet`` container of the rendered pods as ``{"name", "argv", "env"}``, its
    ``--config`` file written under ``workdir`` from the ConfigMap mounted there."""
    configmaps = {c["metadata"]["name"]: c for c in children if c["kind"] == "ConfigMap"}
    cases = []
    for child in children:
        if child["kind"] not in ("Deployment", "StatefulSet"):
            continue
        pod = child["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            command = [*container.get("command", []), *container.get("args", [])]
            if not command or command[0] != "cachefleet":
                continue
            argv = command[1:]
            if "--config" in argv:
                at = argv.index("--config") + 1
                argv[at] = str(_config_file(argv[at], container, volumes, configmaps, workdir))
            cases.append(
                {
                    "name": f"{name}: {child['kind']} {child['metadata']['name']} "
                    f"container {container['name']}",
                    "argv": argv,
                    "env": _environment(container),
                }
            )
    return cases


def probe(
    python: Path | str, cases: Sequence[dict[str, Any]], env: dict[str, str]
) -> dict[str, str]:
    """Each case's verdict from the release whose Python is ``python``: ``"ok"`` or its error."""
    done = subprocess.run(
        [str(python), str(PROBE)],
        input=json.dumps(list(cases)),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    verdicts: dict[str, str] = json.loads(done.stdout.splitlines()[-1])
    return verdicts


def _config_file(
    wanted: str,
    container: dict[str, Any],
    volumes: dict[str, dict[str, Any]],
    configmaps: dict[str, dict[str, Any]],
    workdir: Path,
) -> Path:
    path = PurePosixPath(wanted)
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(mount["mountPath"]) == path.parent:
            source = volumes[mount["name"]].get("configMap")
            assert source is not None, f"{wanted} is not mounted from a ConfigMap"
            data = configmaps[source["name"]]["data"]
            written = workdir / f"{len(list(workdir.iterdir()))}-{path.name}"
            written.write_text(data[mount.get("subPath", path.name)])
            return written
    raise AssertionError(f"--config {wanted} is mounted from nowhere")


def _environment(container: dict[str, Any]) -> dict[str, str]:
    """The container's variables as the kubelet sets them (Secret values stood in for)."""
    env: dict[str, str] = {}
    for variable in container.get("env", []):
        if "value" in variable:
            value = _REFERENCE.sub(lambda m: env.get(m.group(1), m.group(0)), variable["value"])
        else:
            value = SECRET_STAND_IN
        env[variable["name"]] = value
    return env


#: Renders files with a release's own ``render_file`` in one process (a ``cachefleet render`` per
#: file costs that release's imports each time); prints JSON: path -> objects, or the error.
_RENDER = """
import json, sys
from pathlib import Path
from cachefleet.operator.render_command import render_file
out = {}
for path in sys.argv[1:]:
    try:
        out[path] = render_file(Path(path))
    except Exception as error:  # the release's SpecError, whatever it is called there
        out[path] = f"{type(error).__name__}: {error}"
print(json.dumps(out))
"""


def render_with(release: ReleaseCheckout, paths: Sequence[Path]) -> dict[str, Any]:
    """Each file rendered by ``release``'s operator: its objects, or its error as a string."""
    done = release.run_python(_RENDER, *map(str, paths), timeout_s=300)
    assert done.returncode == 0, done.stderr
    rendered: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return rendered
