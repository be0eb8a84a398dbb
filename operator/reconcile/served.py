"""What each ready runtime replica serves: the fingerprint of its model, asked from the pod.

Every runtime pod reports the fingerprint of the model files it loaded in its config response
(the ``cachefleet.fingerprint`` parameter). The operator asks each ready pod of a service and
writes the answers into the status, so a rollout is observable from the CachedInferenceService
itself: while it runs, two fingerprints stand side by side, each with the pods serving it.

A pod that does not answer (restarting, a network policy that keeps the operator out, a
certificate the Secret's CA does not sign) is listed without a fingerprint rather than dropped,
so the status never hides a replica.

The pods are asked the way the fleet serves: over TLS when the service has a TLS Secret, with
the fleet's admin token when its model-config API is restricted. Never through a proxy: pod
addresses are only reachable inside the cluster, and an ``HTTPS_PROXY`` set for the operator's
way out would otherwise receive every pod's address (and the token). Never following a redirect
either: the pod runs the tenant's image, and a redirect would make the operator fetch any
address its own network position reaches.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.manifests import meta

#: The config parameter the runtime reports its model version's fingerprint in.
FINGERPRINT_PARAMETER = "cachefleet.fingerprint"
#: The runtime container and its HTTP port's name (``manifests.runtime``).
_CONTAINER = "server"
_PORT_NAME = "http"
#: The most of a config answer read: a model's config is a few KB, and the pod is the tenant's.
MAX_ANSWER_BYTES = 1 << 20


@dataclass(frozen=True)
class Access:
    """How one service's pods are asked: over TLS or not, the CA their certificate is checked
    against (None: not checked), and the headers its restrictions ask for."""

    https: bool = False
    ca_pem: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is then an HTTPError: no fingerprint


def _opener(access: Access) -> urllib.request.OpenerDirector:
    """An opener that never uses a proxy nor follows a redirect, with the service's TLS."""
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), _NoRedirects()]
    if access.https:
        handlers.append(urllib.request.HTTPSHandler(context=_tls_context(access.ca_pem)))
    return urllib.request.build_opener(*handlers)


def _tls_context(ca_pem: str | None) -> ssl.SSLContext:
    """The chain checked against the Secret's CA when it has one; never the name: pods are
    dialled by address, and a fleet's certificate names its Service, not each pod."""
    if ca_pem is None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    context = ssl.create_default_context(cadata=ca_pem)
    context.check_hostname = False
    return context


class PodDialer:
    """Asks pods for their fingerprint: at most ``concurrency`` at once across every service,
    each within ``timeout_s`` (connect, then each read).

    The worker threads start on first use and idle between passes.
    """

    def __init__(self, *, timeout_s: float, concurrency: int) -> None:
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="served-dial")

    def ask_all(self, addresses: list[str], model: str, access: Access) -> list[str]:
        """The fingerprint each address serves, in order; "" where none came back."""
        opener = _opener(access)
        scheme = "https" if access.https else "http"
        path = f"/v2/models/{urllib.parse.quote(model, safe='')}/config"
        futures = [
            self._pool.submit(self._ask, opener, f"{scheme}://{address}{path}", access.headers)
            for address in addresses
        ]
        return [future.result() for future in futures]

    def _ask(self, opener: urllib.request.OpenerDirector, url: str,
             headers: Mapping[str, str]) -> str:  # fmt: skip
        request = urllib.request.Request(url, headers=dict(headers))
        try:
            with opener.open(request, timeout=self.timeout_s) as response:
                document = json.loads(response.read(MAX_ANSWER_BYTES + 1)[:MAX_ANSWER_BYTES])
        except (OSError, ValueError, urllib.error.URLError):
            return ""
        if not isinstance(document, dict):
            return ""
        parameters = document.get("parameters") or {}
        parameter = parameters.get(FINGERPRINT_PARAMETER) if isinstance(parameters, dict) else {}
        return str((parameter or {}).get("string_value") or "")


def read_served(
    pods: Sequence[Mapping[str, Any]], model: str, access: Access, dialer: PodDialer
) -> list[dict[str, str]]:
    """``[{"pod", "fingerprint"}]`` for each ready pod of ``pods`` (one service's runtime pods,
    from the operator's pod index), by pod name; the fingerprint is "" for a pod that did not
    answer. Blocking: call it off the event loop."""
    ready = []
    for pod in sorted(pods, key=lambda p: str(p.get("metadata", {}).get("name"))):
        address = _address(pod)
        if address is not None:
            ready.append((str(pod["metadata"]["name"]), address))
    fingerprints = dialer.ask_all([address for _, address in ready], model, access)
    return [
        {"pod": name, "fingerprint": fingerprint}
        for (name, _), fingerprint in zip(ready, fingerprints, strict=True)
    ]


def _address(pod: Mapping[str, Any]) -> str | None:
    """``host:port`` of a ready pod's HTTP endpoint; None when it is not ready."""
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    ip = status.get("podIP")
    if not ready or not ip:
        return None
    port = meta.RUNTIME_PORT
    for container in (pod.get("spec") or {}).get("containers") or []:
        if container.get("name") == _CONTAINER:
            for item in container.get("ports") or []:
                if item.get("name") == _PORT_NAME:
                    port = int(item.get("containerPort", port))
    host = f"[{ip}]" if ":" in str(ip) else str(ip)
    return f"{host}:{port}"
