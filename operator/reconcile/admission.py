"""The platform's allow-lists, checked on what the operator would apply.

Anyone who may edit a CachedInferenceService asks the operator, through its own rights, to run
pods: the images and ServiceAccounts of every pod template among the children are checked
against the operator's settings before anything is applied, so a refused service gets nothing
(and a child deleted under it is not restored either: the restore builds through the same
check). The check reads the rendered children, not the spec, so no image the operator renders
(the runtime's default, the model copy's, the managed Redis's) escapes it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

from cachefleet.operator.reconcile.refusals import NOT_ALLOWED, Refused
from cachefleet.operator.reconcile.settings import OperatorSettings

#: The ServiceAccount of a pod that names none.
DEFAULT_SERVICE_ACCOUNT = "default"


def check_allowed(children: Iterable[Mapping[str, Any]], settings: OperatorSettings) -> None:
    """Raise :class:`Refused` (reason NotAllowed) naming every image and ServiceAccount the
    settings do not allow."""
    refused: list[str] = []
    for child in children:
        pod = ((child.get("spec") or {}).get("template") or {}).get("spec")
        if not isinstance(pod, Mapping):
            continue
        what = f"{child['kind']}/{child['metadata']['name']}"
        if settings.allowed_images:
            for container in [*(pod.get("initContainers") or []), *pod.get("containers", [])]:
                image = str(container.get("image", ""))
                if not image_allowed(image, settings.allowed_images):
                    refused.append(f"image {image} ({what})")
        account = str(pod.get("serviceAccountName") or DEFAULT_SERVICE_ACCOUNT)
        allowed = settings.allowed_service_accounts
        if allowed and account not in allowed:
            refused.append(f"ServiceAccount {account} ({what})")
    if refused:
        raise Refused(
            NOT_ALLOWED,
            f"the operator's settings do not allow {', '.join(dict.fromkeys(refused))}; allowed "
            f"images: {', '.join(settings.allowed_images) or 'any'}; allowed ServiceAccounts: "
            f"{', '.join(settings.allowed_service_accounts) or 'any'}",
        )


def image_allowed(image: str, allowed: Iterable[str]) -> bool:
    """Whether ``image`` comes from one of ``allowed``: a registry or repository prefix ending in
    ``/``, or a name that the image equals or continues with ``/``, ``:`` or ``@`` (so
    ``ghcr.io/acme`` allows ``ghcr.io/acme/x`` and ``ghcr.io/acme:1``, not ``ghcr.io/acmex``).
    Both sides are read as the container runtime reads them (``redis:7`` is
    ``docker.io/library/redis:7``), so a short name cannot pass for another registry's."""
    image = full_name(image)
    for entry in allowed:
        if entry.endswith("/"):
            if image.startswith(full_name(entry, entry=True)):
                return True
            continue
        entry = full_name(entry, entry=True)
        if image == entry or any(image.startswith(entry + end) for end in "/:@"):
            return True
    return False


def full_name(reference: str, *, entry: bool = False) -> str:
    """``reference`` with the registry the container runtime would pull it from: Docker Hub
    (``docker.io``, with ``library/`` for a one-part name) unless its first part names a host
    (a ``.`` or ``:`` in it, or ``localhost``). An allow-list ``entry`` of one part with a
    ``.`` (``registry.example.com``) or ``localhost`` is a registry."""
    first, slash, _ = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return reference
    if not slash and entry and ("." in first or first == "localhost"):
        return reference
    return f"docker.io/{reference}" if slash else f"docker.io/library/{reference}"


def host_allowed(host: str, allowed: Iterable[str]) -> bool:
    """Whether the operator may dial ``host`` (shell patterns, case-insensitive)."""
    return any(fnmatch.fnmatch(host.lower(), pattern.lower()) for pattern in allowed)
