"""The generated Redis password and cache secret: made once, then always read back from their
Secrets.

Regenerating the password on a later reconcile would lock the running Redis away from new pods,
and a new cache secret would make every entry the fleet wrote look forged, so the Secret is the
source of truth as soon as it exists.
"""

from __future__ import annotations

import base64
import secrets

from cachefleet.operator.manifests.meta import Owner, cache_secret_name, redis_auth_secret_name
from cachefleet.operator.manifests.runtime import ADMIN_TOKEN_KEY, CACHE_SECRET_KEY
from cachefleet.operator.reconcile.kube import Kube

PASSWORD_KEY = "password"


def existing_or_new_password(kube: Kube, owner: Owner) -> str:
    stored = read_secret_key(kube, owner.namespace, redis_auth_secret_name(owner), PASSWORD_KEY)
    return stored or secrets.token_urlsafe(32)


def existing_or_new_cache_secret(kube: Kube, owner: Owner) -> str:
    stored = read_secret_key(kube, owner.namespace, cache_secret_name(owner), CACHE_SECRET_KEY)
    return stored or secrets.token_urlsafe(32)


def existing_or_new_admin_token(kube: Kube, owner: Owner) -> str:
    """The token of the runtime's restricted admin APIs, kept in the fleet's Secret like the
    cache secret."""
    stored = read_secret_key(kube, owner.namespace, cache_secret_name(owner), ADMIN_TOKEN_KEY)
    return stored or secrets.token_urlsafe(32)


def read_secret_key(kube: Kube, namespace: str, name: str, key: str) -> str | None:
    """A value from a Secret (data or stringData), or None when it is missing."""
    secret = kube.get("v1", "Secret", namespace, name)
    if secret is None:
        return None
    stored = (secret.get("data") or {}).get(key)
    if stored:
        return base64.b64decode(stored).decode()
    plain = (secret.get("stringData") or {}).get(key)
    return str(plain) if plain else None
