"""The keys the fleet's pods read, and who owns the Secrets that hold them.

``<name>-fleet`` holds the cache entries' MAC key (``cache-secret``) and the restricted APIs'
token (``admin-token``). The cases a platform team runs into, and what the operator does:

- **The Secret is deleted while pods read it.** The running pods keep their keys (a container
  reads its environment once), so nothing is broken yet; new keys would roll the fleet, make
  every entry in Redis look forged and refuse every admin client holding the token. The operator
  does not invent them unasked: the service is Stalled (``FleetSecretMissing``) until the Secret
  is restored (from a backup, or by its external controller), or the service is annotated
  ``cachefleet.io/fleet-secret-missing: regenerate`` to accept new keys. A key no pod reads yet
  (restricted APIs just switched on) is generated as before: it can break nothing.
- **The Secret was not made by this service** (ExternalSecrets, SealedSecrets, ``kubectl
  create``): it is read, never applied. Applying it would add a second controller owner
  reference (the API server refuses that with 422) or make the service its owner, so deleting
  the service would delete a Secret it did not create.
- **Another service reads this fleet's Secret through ``spec.cache.secretRef``.** The reader
  becomes a second, non-controller owner of it (under a field manager of its own, so neither
  service's apply removes the other's reference): the garbage collector deletes a dependent only
  when all its owners are gone, so deleting the service that made it no longer deletes it under
  the others.
- **A Secret read through ``secretRef`` changes.** A digest of the key (never the key) goes into
  the reader's pod template, so its pods roll with the new key as the maker's pods do.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cachefleet.operator.manifests.meta import KIND, MANAGER, Owner, cache_secret_name
from cachefleet.operator.manifests.runtime import ADMIN_TOKEN_KEY, CACHE_SECRET_KEY
from cachefleet.operator.manifests.spec import ServiceSpec
from cachefleet.operator.reconcile.kube import Kube
from cachefleet.operator.reconcile.passwords import secret_value
from cachefleet.operator.reconcile.refusals import (
    FLEET_SECRET_INCOMPLETE,
    FLEET_SECRET_MISSING,
    Refused,
)

#: The annotation on a service that accepts new fleet keys when the Secret is gone.
REGENERATE_ANNOTATION = "cachefleet.io/fleet-secret-missing"
REGENERATE = "regenerate"


@dataclass(frozen=True)
class FleetKeys:
    """What the pods will read: the cache secret (generated, or the content of the Secret
    ``secretRef`` names: only its digest is rendered) and the admin token."""

    cache_secret: str | None = None
    admin_token: str | None = None
    #: ``<name>-fleet`` exists and this service did not make it: read, never applied.
    foreign: bool = False
    #: Another service's fleet Secret this one reads through ``secretRef``.
    shared: Mapping[str, Any] | None = None

    def keep(self, children: list[dict[str, Any]], owner: Owner) -> list[dict[str, Any]]:
        """``children`` without the fleet Secret when this service did not make it."""
        if not self.foreign:
            return children
        name = cache_secret_name(owner)
        return [
            c for c in children if not (c["kind"] == "Secret" and c["metadata"]["name"] == name)
        ]


def read_fleet_keys(
    kube: Kube, spec: ServiceSpec, owner: Owner, annotations: Mapping[str, str]
) -> FleetKeys:
    """The keys for ``spec``'s pods, decided as the module docstring says; :class:`Refused`
    when the pods' keys are gone and may not be replaced."""
    wanted = []
    shared = None
    referenced = None
    if spec.cache.uses_redis and spec.cache.secret_ref is None:
        wanted.append(CACHE_SECRET_KEY)
    elif spec.cache.uses_redis and spec.cache.secret_ref is not None:
        ref = spec.cache.secret_ref
        live_ref = kube.get("v1", "Secret", owner.namespace, ref.name)
        referenced = secret_value(live_ref, ref.key) if live_ref is not None else None
        if live_ref is not None and _made_by_another_service(live_ref, owner):
            shared = live_ref
    if spec.runtime.restricted_apis:
        wanted.append(ADMIN_TOKEN_KEY)
    if not wanted:
        return FleetKeys(cache_secret=referenced, shared=shared)
    name = cache_secret_name(owner)
    live = kube.get("v1", "Secret", owner.namespace, name)
    foreign = live is not None and not _made_by(live, owner)
    regenerate = annotations.get(REGENERATE_ANNOTATION) == REGENERATE
    values: dict[str, str] = {}
    read: set[str] | None = None  # the keys the pods read: looked up only when one is missing
    for key in wanted:
        value = secret_value(live, key) if live is not None else None
        if value is None and foreign:
            raise Refused(
                FLEET_SECRET_INCOMPLETE,
                f"Secret {name} was not made by the operator and has no key {key}: add it "
                "(the operator does not write into a Secret it did not create)",
            )
        if value is None and not regenerate:
            read = _keys_pods_read(kube, owner) if read is None else read
            if key in read:
                raise Refused(FLEET_SECRET_MISSING, _missing_message(name, key, live is None))
        values[key] = value or secrets.token_urlsafe(32)
    return FleetKeys(
        cache_secret=values.get(CACHE_SECRET_KEY, referenced),
        admin_token=values.get(ADMIN_TOKEN_KEY),
        foreign=foreign,
        shared=shared,
    )


def share(kube: Kube, owner: Owner, keys: FleetKeys) -> None:
    """Make ``owner`` a non-controller owner of the fleet Secret it shares, so the garbage
    collector keeps it while this service lives (see the module docstring)."""
    if keys.shared is None or owner.uid is None:
        return
    meta = keys.shared["metadata"]
    reference = {"apiVersion": owner.reference()["apiVersion"], "kind": KIND,
                 "name": owner.name, "uid": owner.uid}  # fmt: skip
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": meta["name"],
                "namespace": owner.namespace,
                "ownerReferences": [reference],
            },
        },
        manager=share_manager(owner),
    )


def share_manager(owner: Owner) -> str:
    """The field manager of one reader's owner reference (a manager name may have 128
    characters; a uid has 36)."""
    return f"{MANAGER}-share-{owner.uid}"


def _missing_message(name: str, key: str, whole: bool) -> str:
    what = f"Secret {name}" if whole else f"key {key} of Secret {name}"
    return (
        f"{what} is gone, and the fleet's pods read {key}: running pods keep their keys, new "
        f"pods cannot start. Restore the Secret (from a backup, or its external controller), or "
        f"annotate the service {REGENERATE_ANNOTATION}={REGENERATE} to generate new keys (the "
        "fleet rolls, its cache entries in Redis read as forged, admin clients need the new "
        "token)"
    )


def _references(secret: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    references: Iterable[Mapping[str, Any]] = (secret.get("metadata") or {}).get(
        "ownerReferences"
    ) or []
    return references


def _made_by(secret: Mapping[str, Any], owner: Owner) -> bool:
    """Whether ``owner`` made ``secret`` (its controller reference names it)."""
    if owner.uid is None:
        return True
    return any(r.get("uid") == owner.uid and r.get("controller") for r in _references(secret))


def _made_by_another_service(secret: Mapping[str, Any], owner: Owner) -> bool:
    return any(
        r.get("kind") == KIND and r.get("controller") and r.get("uid") != owner.uid
        for r in _references(secret)
    )


def _keys_pods_read(kube: Kube, owner: Owner) -> set[str]:
    """The keys of ``<name>-fleet`` the live runtime Deployment's pods read."""
    deployment = kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
    if deployment is None:
        return set()
    name = cache_secret_name(owner)
    pod = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]
    keys = set()
    for container in containers:
        for env in container.get("env") or []:
            ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
            if ref.get("name") == name:
                keys.add(str(ref.get("key")))
    return keys
