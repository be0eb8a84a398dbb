"""``cachefleet operator`` as a process against the real control plane, under a ServiceAccount.

The process holds a token of the ServiceAccount ``deploy/`` or the chart made (``kubectl create
token``), so every request it makes is authorized by the RBAC the user installs, not by an admin
certificate. Its output goes to a log file; it leads a process group of its own, stopped by its
PID (``ManagedProcess``).
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from support.plane import Plane
from support.processes import CACHEFLEET, ManagedProcess, RedisProcess

#: deploy/cachefleet.yaml's namespace.
OPERATOR_NAMESPACE = "cachefleet-system"


def service_account_token(plane: Plane, account: str, namespace: str) -> str:
    """A bound token of ``account``, valid for the session."""
    done = plane.kubectl("create", "token", account, "-n", namespace, "--duration", "24h")
    return done.stdout.strip()


@dataclass
class OperatorProcess:
    process: ManagedProcess
    kubeconfig: Path

    @classmethod
    def start(
        cls,
        plane: Plane,
        folder: Path,
        account: str,
        *flags: str,
        namespace: str = OPERATOR_NAMESPACE,
        env: Mapping[str, str] | None = None,
        server: str | None = None,
        name: str = "operator",
    ) -> OperatorProcess:
        """The chart's command (``--standalone --all-namespaces`` unless ``flags`` say
        otherwise), reaching the API server at ``server`` (a proxy) or directly."""
        folder.mkdir(parents=True, exist_ok=True)
        token = service_account_token(plane, account, namespace)
        kubeconfig = plane.token_kubeconfig(folder / f"{name}.kubeconfig", token, server)
        command = [*CACHEFLEET, "operator", "-v", *(flags or ("--standalone", "--all-namespaces"))]
        environment = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_ID": name,
                       "CACHEFLEET_OPERATOR_NAMESPACE": namespace, **(env or {})}  # fmt: skip
        process = ManagedProcess(name, command, folder / f"{name}.log", environment)
        return cls(process, kubeconfig)

    @property
    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return self.process.process.poll() is None

    def stop(self) -> None:
        self.process.stop()


def give_password(redis: RedisProcess, password: str) -> None:
    """Have the stand-in for a managed Redis take the password the operator generated for it.
    One stand-in serves the session: it takes every service's password (the default user may
    hold several), so services made one after another all reach it."""
    redis.command("ACL", "SETUSER", "default", "on", f">{password}")
    redis.password = password


def redis_password(plane: Plane, namespace: str, service: str) -> str | None:
    """The password the operator generated for ``service``'s managed Redis (None until its
    Secret has one)."""
    done = plane.kubectl("get", f"secret/{service}-redis-auth", "-n", namespace, "-o", "json",
                         check=False)  # fmt: skip
    data = (json.loads(done.stdout).get("data") or {}) if done.returncode == 0 else {}
    return base64.b64decode(data["password"]).decode() if "password" in data else None
