"""The declared floor of the Kubernetes client runs the operator's API adapter.

``pyproject.toml`` names the oldest ``kubernetes`` the operator supports. This installs exactly
that version (kept in ``.cache/client-floor``, so only the first run downloads it), puts it in
front of the development environment's own copy, and runs ``reconcile/kube.py`` against a small
HTTP server on loopback: a GET, a GET of a missing object, a server-side apply and a delete.
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

pytestmark = pytest.mark.timeout(180)

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


def declared_floor() -> str:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [spec] = [d for d in project["dependencies"] if re.match(r"kubernetes\b", d)]
    match = re.fullmatch(r"kubernetes>=([0-9.]+)", spec.replace(" ", ""))
    assert match, f"the kubernetes dependency should be a plain floor: {spec}"
    return match.group(1)


def floor_client(version: str) -> Path:
    target = CACHE / f"kubernetes-{version}"
    if not (target / "kubernetes").is_dir():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps"]
        subprocess.run([*pip, "--target", str(target), f"kubernetes=={version}"], check=True)
    return target


def test_the_declared_kubernetes_floor_runs_the_api_adapter() -> None:
    version = declared_floor()
    target = floor_client(version)
    env = {**os.environ, "PYTHONPATH": str(target), "PYTHONSAFEPATH": "1"}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["client_file"].startswith(str(target))
    major_minor = [*version.split("."), "0"][:2]
    assert result["version"].split(".")[:2] == major_minor
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
