"""The generated Redis password: made once, then always read back from its Secret (the fleet
Secret's keys are decided in ``fleet_secret``).

Regenerating the password on a later reconcile would lock the running Redis away from new pods,
so the Secret is the source of truth as soon as it exists.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cachefleet.operator.manifests.meta import Owner, redis_auth_secret_name
from cachefleet.operator.reconcile.kube import Kube, KubeError

PASSWORD_KEY = "password"


@dataclass(frozen=True)
class GeneratedPassword:
    value: str
    #: The uid of the Secret ``value`` was read from; None for a new password.
    read_from: str | None = None


def existing_or_new_password(kube: Kube, owner: Owner) -> GeneratedPassword:
    secret = kube.get("v1", "Secret", owner.namespace, redis_auth_secret_name(owner))
    if secret is not None:
        stored = secret_value(secret, PASSWORD_KEY)
        if stored:
            return GeneratedPassword(stored, (secret.get("metadata") or {}).get("uid"))
    return GeneratedPassword(secrets.token_urlsafe(32))


def pin_password_secret(
    children: list[dict[str, Any]], owner: Owner, read_from: str | None
) -> list[dict[str, Any]]:
    """``children`` with the generated password's Secret applied only over the Secret its
    password was read from (its uid in the apply, which the API server then requires).

    A Secret deleted between the read and the apply (a user rotating the password, while a
    reconcile is under way) would otherwise be created again by that apply, with the very
    password that was meant to go. The server refuses the pinned apply instead
    (:func:`password_secret_replaced`), and the reconcile is redone: its read finds no Secret,
    and makes a new password.
    """
    if read_from is None:
        return children
    name = redis_auth_secret_name(owner)
    return [
        {**c, "metadata": {**c["metadata"], "uid": read_from}}
        if c["kind"] == "Secret" and c["metadata"]["name"] == name
        else c
        for c in children
    ]


def password_secret_replaced(error: KubeError) -> bool:
    """Whether ``error`` is the API server refusing a pinned apply: no Secret of that uid
    exists (409, "uid mismatch"), or another one took its name (422 on ``metadata.uid``).
    Nothing else a reconcile sends can conflict: its applies are forced and carry no
    resourceVersion, and only this one a uid."""
    if error.status == 409:
        return True
    return error.invalid and any(c.field == "metadata.uid" for c in error.causes)


def read_secret_key(kube: Kube, namespace: str, name: str, key: str) -> str | None:
    """A value from a Secret (data or stringData), or None when it is missing."""
    secret = kube.get("v1", "Secret", namespace, name)
    return None if secret is None else secret_value(secret, key)


def secret_value(secret: Mapping[str, Any], key: str) -> str | None:
    """A value of a Secret read from the API (data or stringData), or None when missing."""
    stored = (secret.get("data") or {}).get(key)
    if stored:
        return base64.b64decode(stored).decode()
    plain = (secret.get("stringData") or {}).get(key)
    return str(plain) if plain else None
