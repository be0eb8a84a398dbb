"""Every child object of a CachedInferenceService, in the order they should be applied."""

from __future__ import annotations

from typing import Any

from cachefleet.operator.manifests import autoscaling, operator_access, redis, runtime
from cachefleet.operator.manifests.meta import DEFAULT_OPERATOR_NAMESPACE, Owner, config_hash
from cachefleet.operator.manifests.names import check_name
from cachefleet.operator.manifests.release import RELEASE_RUNTIME_IMAGE
from cachefleet.operator.manifests.spec import ServiceSpec, UserIds

# Every kind a CachedInferenceService may own: (apiVersion, kind). Pruning looks at these.
CHILD_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "Secret"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("apps/v1", "StatefulSet"),
    ("apps/v1", "Deployment"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    *autoscaling.SCALER_KINDS,
)
#: The kinds the operator lists, watches and prunes (by label): every child kind but Secret.
#: RBAC cannot grant by label, so listing or watching even the fleets' own Secrets would need
#: list and watch on every Secret of the cluster (kube-system's and Helm's release Secrets
#: included). The operator reads Secrets by name (get), writes its generated ones with
#: server-side apply (create, patch) and deletes none: a generated Secret the spec stops needing
#: stays, owned by its service, until the garbage collector takes it with the service. A deleted
#: or edited generated Secret is seen at the next resync, not by a watch.
LISTED_KINDS: tuple[tuple[str, str], ...] = tuple(k for k in CHILD_KINDS if k != ("v1", "Secret"))


def needs_generated_password(spec: ServiceSpec) -> bool:
    """Whether the operator must keep a generated Redis password in a Secret of its own."""
    auth = spec.cache.redis.auth_or_default
    return spec.cache.managed_redis and auth.enabled and auth.password_secret_ref is None


def needs_generated_cache_secret(spec: ServiceSpec) -> bool:
    """Whether the operator must keep a generated cache secret (the key of the Redis entries'
    MAC) in a Secret of its own: a Redis tier, and no Secret of the user's named."""
    return spec.cache.uses_redis and spec.cache.secret_ref is None


def build_children(
    spec: ServiceSpec,
    *,
    owner: Owner,
    redis_password: str | None = None,
    cache_secret: str | None = None,
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE,
    admin_token: str | None = None,
    runtime_image: str = RELEASE_RUNTIME_IMAGE,
    user_ids: UserIds = "fixed",
    tls_digest: str = "",
    runtime_access: bool = False,
    upstream_digest: str = "",
) -> list[dict[str, Any]]:
    """All children.

    ``redis_password`` is the password the pods will read: the generated one (required when
    :func:`needs_generated_password`) or the one in the user's Secret when it could be read. Its
    digest goes into the pod templates, so a rotated password rolls Redis and the runtime pods.
    ``cache_secret`` is the generated cache secret (required when
    :func:`needs_generated_cache_secret`), or the content of the Secret ``spec.cache.secretRef``
    names when it could be read; a new one rolls the runtime pods likewise.
    ``operator_namespace`` is where the operator runs, for the Redis NetworkPolicy.
    ``admin_token`` is the token of the restricted admin APIs (``spec.runtime.restrictedApis``):
    its Secret is a child when it is given (the operator and ``render`` always give one: the
    generated token, or the one already in the Secret), and its digest rolls the pods.
    ``runtime_image`` runs where the spec names none (the operator's release's runtime, or the
    operator's configured mirror of it). ``user_ids`` is the operator's setting for services
    whose spec leaves ``userIds`` unset (platform on OpenShift). ``tls_digest`` is the digest of
    the runtime's TLS Secret (``manifests.tls``): a renewed certificate rolls the runtime pods.
    ``upstream_digest`` is the digest of the upstream's auth value and CA
    (``upstream.upstream_digest``): a rotated token or CA rolls the runtime pods.
    ``runtime_access`` adds the NetworkPolicy that admits the operator to the runtime pods
    (``manifests.operator_access``).
    """
    check_name(owner.name)
    if spec.user_ids is None:
        spec = spec.model_copy(update={"user_ids": user_ids})
    children: list[dict[str, Any]] = []
    digest = password_digest(spec, redis_password)
    if spec.cache.managed_redis:
        children += _redis_children(spec, owner, redis_password, digest, operator_namespace)
    secrets_digest = digest
    generated: dict[str, str] = {}
    if needs_generated_cache_secret(spec):
        if cache_secret is None:
            raise ValueError("a generated cache secret must be passed in")
        generated["secret"] = cache_secret
        secrets_digest += config_hash("cache-secret", cache_secret)
    elif cache_secret is not None and spec.cache.uses_redis:
        # The content of the Secret spec.cache.secretRef names (another fleet's, or the user's):
        # its digest rolls these pods when it rotates, as the maker's pods roll.
        secrets_digest += config_hash("cache-secret", cache_secret)
    if admin_token is not None and spec.runtime.restricted_apis:
        generated["admin_token"] = admin_token
        secrets_digest += config_hash("admin-token", admin_token)
    if generated:
        children.append(runtime.build_fleet_secret(spec, owner=owner, **generated))
    children.append(runtime.build_runtime_configmap(spec, owner=owner))
    children.append(runtime.build_runtime_service(spec, owner=owner))
    children.append(
        runtime.build_runtime_deployment(
            spec,
            owner=owner,
            password_digest=secrets_digest,
            runtime_image=runtime_image,
            tls_digest=tls_digest,
            upstream_digest=upstream_digest,
        )
    )
    if runtime_access:
        children.append(
            operator_access.build_runtime_access_policy(
                owner, operator_namespace=operator_namespace
            )
        )
    if spec.autoscaling is not None:
        children.append(autoscaling.build_scaler(spec, owner=owner))
    return children


def uses_redis_password(spec: ServiceSpec) -> bool:
    """Whether the pods read a Redis password at start (generated, or from the user's Secret)."""
    redis = spec.cache.redis
    if not spec.cache.uses_redis:
        return False
    if redis.external is not None:
        return redis.external.password_secret_ref is not None
    return redis.auth_or_default.enabled


def password_digest(spec: ServiceSpec, password: str | None) -> str:
    """A digest of the Redis password: pods read it at start, so a new one must roll them."""
    if password is None or not uses_redis_password(spec):
        return ""
    return config_hash("redis-password", password)


def _redis_children(
    spec: ServiceSpec,
    owner: Owner,
    password: str | None,
    digest: str,
    operator_namespace: str,
) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = []
    if needs_generated_password(spec):
        if password is None:
            raise ValueError("a generated Redis password must be passed in")
        children.append(redis.build_redis_secret(spec, owner=owner, password=password))
    children += [
        redis.build_redis_configmap(spec, owner=owner),
        redis.build_redis_headless_service(spec, owner=owner),
        redis.build_redis_service(spec, owner=owner),
        redis.build_redis_statefulset(spec, owner=owner, password_digest=digest),
    ]
    if spec.cache.redis.disruption_budget.enabled:
        children.append(redis.build_redis_pdb(spec, owner=owner))
    if spec.cache.redis.network_policy.enabled:
        children.append(
            redis.build_redis_networkpolicy(
                spec, owner=owner, operator_namespace=operator_namespace
            )
        )
    return children
