"""Runtime pods of one release run what the other release's operator renders.

During an upgrade, pods of the previous release (a pinned ``spec.runtime.image``, a pod not yet
rolled, one that restarts mid-rollout) read today's operator's ConfigMap, environment and command
line; after a rollback, today's pods read the previous operator's. Both are checked with each
release's own code: its command-line parser and settings loader, and its real server.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.previous_release import ReleaseCheckout
from support.processes import ManagedProcess, free_port
from support.skew import NEW_EXAMPLES, example_objects, probe, render_with, runtime_invocations

from cachefleet.bench.processes import http_ok
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.render_command import render_file

pytestmark = [pytest.mark.timeout(600), pytest.mark.full_samples]


def rendered_today(tmp_path: Path) -> list[tuple[str, list[dict[str, Any]]]]:
    """Every example object as today's operator renders it."""
    rendered = []
    for name, body in example_objects():
        if name in NEW_EXAMPLES:
            continue  # a kind of service the previous release's pods cannot serve
        path = tmp_path / "object.yaml"
        path.write_text(yaml.safe_dump(body))
        try:
            rendered.append((name, render_file(path)))
        except SpecError:
            continue  # test data of a broken object: no operator renders it
    return rendered


def test_the_previous_runtime_accepts_what_todays_operator_renders(
    previous_release: ReleaseCheckout, tmp_path: Path
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    cases = [
        case
        for name, children in rendered_today(tmp_path)
        for case in runtime_invocations(name, children, configs)
    ]
    examples = list((Path(__file__).parents[2] / "examples").glob("*.yaml"))
    assert len(cases) >= len(examples) - len(NEW_EXAMPLES)
    verdicts = probe(previous_release.python, cases, previous_release.env())
    refused = {name: verdict for name, verdict in verdicts.items() if verdict != "ok"}
    assert not refused, f"{previous_release.release.version} refuses: {refused}"


def test_todays_runtime_accepts_what_the_previous_operator_renders(
    previous_release: ReleaseCheckout, tmp_path: Path
) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    objects = example_objects(previous_release.root)
    paths = []
    for index, (_, body) in enumerate(objects):
        paths.append(tmp_path / f"object-{index}.yaml")
        paths[-1].write_text(yaml.safe_dump(body))
    rendered = render_with(previous_release, paths)
    cases = []
    for (name, _), path in zip(objects, paths, strict=True):
        children = rendered[str(path)]
        if isinstance(children, list):  # (a string: its own test data of a broken object)
            cases += runtime_invocations(name, children, configs)
    assert cases, "the previous release rendered none of its examples"
    verdicts = probe(sys.executable, cases, todays_env())
    refused = {name: verdict for name, verdict in verdicts.items() if verdict != "ok"}
    assert not refused, f"today's runtime refuses {previous_release.release.version}'s: {refused}"


def todays_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEFLEET_")}
    return {**env, "PYTHONSAFEPATH": "1"}


def test_the_previous_runtime_serves_with_todays_config(
    previous_release: ReleaseCheckout, model_repository: Path, tmp_path: Path
) -> None:
    """Not only loaded: the previous release's server starts on today's ConfigMap, environment
    and command line (model folder and ports moved to this machine) and becomes ready."""
    configs = tmp_path / "configs"
    configs.mkdir()
    [(name, children)] = [
        (n, c) for n, c in rendered_today(tmp_path) if n in ("densenet-gpu-aof.yaml",)
    ]
    [server] = [
        case for case in runtime_invocations(name, children, configs) if case["argv"][0] == "serve"
    ]
    port, grpc_port = free_port(), free_port()
    command = [str(previous_release.cachefleet), *server["argv"]]
    command += ["--model-repository", str(model_repository), "--host", "127.0.0.1"]
    command += ["--port", str(port), "--grpc-port", str(grpc_port), "--execution-provider", "cpu"]
    process = ManagedProcess(
        "previous cachefleet serve",
        command,
        tmp_path / "server.log",
        previous_release.env(server["env"]),
    )
    try:
        process.wait_until(http_ok(f"http://127.0.0.1:{port}/v2/health/ready"), timeout_s=180)
    finally:
        process.stop()
