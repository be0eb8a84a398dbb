"""The declared floors of the Kubernetes client and of kopf run the operator.

``pyproject.toml`` names the oldest ``kubernetes`` and ``kopf`` the operator supports. Each test
installs exactly that version (kept in ``.cache/client-floor``, so only the first run downloads
it) and puts it in front of the development environment's own copy. The client runs
``reconcile/kube.py`` against a small HTTP server on loopback: a GET, a GET of a missing object,
a server-side apply and a delete. kopf runs the operator's own tests that start the operator
against the emulator (the handlers module imported, the startup configuration with server-side
label selectors, the index the periodic task reads, no finalizer), in a pytest of their own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "client-floor"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

SCRIPT = r"""
import json, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import kubernetes
from kubernetes import client

from cachefleet.operator.reconcile.kube import Kube

seen = []

class Handler(BaseHTTPRequestHandler):
    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        seen.append({"method": self.command, "path": self.path,
                     "type": self.headers.get("Content-Type"), "body": body.decode()})
        if self.path.startswith("/api/v1/namespaces/ml/configmaps/missing"):
            status, answer = 404, {"kind": "Status", "code": 404, "message": "not found"}
        else:
            status, answer = 200, {"kind": "ConfigMap", "metadata": {"name": "c"}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_PATCH = do_DELETE = _answer
    def log_message(self, *args):
        pass

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_port}")
kube = Kube(client.ApiClient(configuration))
obj = {"apiVersion": "v1", "kind": "ConfigMap",
       "metadata": {"name": "c", "namespace": "ml"}, "data": {"k": "v"}}
result = {
    "version": kubernetes.__version__,
    "client_file": kubernetes.__file__,
    "get": kube.get("v1", "ConfigMap", "ml", "c"),
    "missing": kube.get("v1", "ConfigMap", "ml", "missing"),
    "apply": kube.apply(obj),
}
kube.delete(obj)
result["seen"] = seen
server.shutdown()
print(json.dumps(result))
"""


def declared_floor(package: str = "kubernetes") -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    operator = project["optional-dependencies"]["operator"]  # the operator image's extra
    [spec] = [d for d in operator if re.match(rf"{package}\b", d)]
    match = re.fullmatch(rf"{package}>=([0-9.]+)", spec.replace(" ", ""))
    assert match, f"the {package} dependency should be a plain floor: {spec}"
    return match.group(1)


def floor_install(version: str, package: str = "kubernetes") -> Path:
    """Exactly ``package==version``, without its dependencies (the environment's serve)."""
    target = CACHE / f"{package}-{version}"
    if not (target / package).is_dir():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--target", str(target), f"{package}=={version}"], check=True)
    return target


def same_release(installed: str, declared: str) -> bool:
    """``1.45.0`` is the release ``>=1.45`` names (pip reads ``==1.45`` as ``==1.45.0``)."""
    wanted, have = declared.split("."), installed.split(".")
    return have[: len(wanted)] == wanted and all(part == "0" for part in have[len(wanted) :])


def test_the_declared_kubernetes_floor_runs_the_api_adapter() -> None:
    version = declared_floor()
    target = floor_install(version)
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["client_file"].startswith(str(target))
    assert same_release(result["version"], version)
    assert result["get"] == {"kind": "ConfigMap", "metadata": {"name": "c"}}
    assert result["missing"] is None
    methods = [(r["method"], r["path"].split("?")[0]) for r in result["seen"]]
    path = "/api/v1/namespaces/ml/configmaps"
    assert methods == [
        ("GET", f"{path}/c"),
        ("GET", f"{path}/missing"),
        ("PATCH", f"{path}/c"),
        ("DELETE", f"{path}/c"),
    ]
    apply = result["seen"][2]
    assert apply["type"].startswith("application/apply-patch+yaml")
    assert "fieldManager=cachefleet-operator" in apply["path"]
    assert json.loads(apply["body"])["data"] == {"k": "v"}


KOPF_TESTS = [
    "tests/operator/test_operator_kmock.py::test_creating_a_service_creates_owned_children_and_status",
    "tests/operator/test_operator_kmock.py::test_deleted_and_edited_children_are_restored",
    "tests/operator/test_reconcile_requests.py::"
    "test_child_watches_ask_the_server_for_the_operators_children_only",
    "tests/operator/test_reconcile_requests.py::"
    "test_services_carry_no_finalizer_and_an_old_one_is_removed",
    "tests/operator/test_periodic.py::test_the_running_operator_resyncs_the_services_it_watches",
]


def test_the_declared_kopf_floor_runs_the_operator() -> None:
    version = declared_floor("kopf")
    target = floor_install(version, "kopf")
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    show = "import json, kopf, importlib.metadata as m; "
    show += "print(json.dumps([m.version('kopf'), kopf.__file__]))"
    found = subprocess.run(
        [sys.executable, "-c", show], env=env, capture_output=True, text=True, timeout=60
    )
    assert found.returncode == 0, found.stderr
    installed, kopf_file = json.loads(found.stdout)
    assert kopf_file.startswith(str(target)), kopf_file
    assert same_release(installed, version), (installed, version)

    pytest_command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *KOPF_TESTS]
    done = subprocess.run(
        pytest_command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert f"{len(KOPF_TESTS)} passed" in done.stdout
