"""The generated Redis password: made once, then always read back from its Secret (the fleet
Secret's keys are decided in ``fleet_secret``).

Regenerating the password on a later reconcile would lock the running Redis away from new pods,
so the Secret is the source of truth as soon as it exists.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from typing import Any

from cachefleet.operator.manifests.meta import Owner, redis_auth_secret_name
from cachefleet.operator.reconcile.kube import Kube

PASSWORD_KEY = "password"


def existing_or_new_password(kube: Kube, owner: Owner) -> str:
    stored = read_secret_key(kube, owner.namespace, redis_auth_secret_name(owner), PASSWORD_KEY)
    return stored or secrets.token_urlsafe(32)


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
