"""The operator's own settings, read from the environment once at startup."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from cachefleet.operator.manifests.meta import DEFAULT_OPERATOR_NAMESPACE
from cachefleet.operator.manifests.release import RELEASE_RUNTIME_IMAGE
from cachefleet.operator.manifests.spec import UserIds


@dataclass(frozen=True)
class OperatorSettings:
    """How patiently the operator talks to Redis, and how often it looks again unasked."""

    redis_timeout_s: float = 2.0
    """Connect and command timeout for the operator's own Redis calls (CONFIG SET, INFO)."""
    redis_address: str | None = None
    """host:port to reach every managed Redis at instead of its Service (development only)."""
    operator_namespace: str = DEFAULT_OPERATOR_NAMESPACE
    """Where the operator runs (the chart passes it through the downward API): each managed
    Redis's NetworkPolicy admits the operator's pods from there unless the spec names another."""
    runtime_image: str = RELEASE_RUNTIME_IMAGE
    """The runtime image of services that name none: this release's, or a mirror of it (the
    chart's runtimeImage value, for a private registry)."""

    user_ids: UserIds = "fixed"
    """The pods' user ids where a spec leaves ``userIds`` unset: "platform" on OpenShift (the
    chart's openshift.enabled), whose SCCs assign them."""

    resync_interval_s: float = 300.0
    """How often every service is re-applied in full (drift no watch saw, a rotated password).
    The child watches restore edits and deletions at once; this is the safety net, and its
    interval bounds the steady API load (about a dozen requests per service per pass)."""
    cache_figures_interval_s: float = 30.0
    """How often each managed Redis's INFO figures are read."""
    cache_figures_write_interval_s: float = 300.0
    """The least time between two writes of a service's cache figures into its status: figures
    move with every request, and a status write wakes every watcher of the service."""
    handler_workers: int = 16
    """Reconciles at once in kopf's handlers (its thread pool; kopf's own default is the
    cores + 4). A reconcile mostly waits on the API server, a dozen calls in a row: with 1,000
    services applied at once, 6 at a time left most of them waiting minutes for their first
    reconcile, their queued events held in memory meanwhile."""
    periodic_workers: int = 4
    """Services handled at once by a periodic pass, so one slow Redis or API call does not hold
    up the others."""
    served_timeout_s: float = 2.0
    """How long the served pass waits for one runtime pod to connect, and then for each read
    of its answer."""
    served_concurrency: int = 64
    """Runtime pods asked at once by a served pass (and services handled at once): a pass over
    5,000 pods that all time out takes 5,000 x the timeout / this."""
    served_pass_budget_s: float = 120.0
    """The most a served pass may run: the services it has not started by then wait for the
    next pass (the order is shuffled every pass, so none is always the one left out)."""
    runtime_network_policy: bool = False
    """Give every runtime a NetworkPolicy admitting the operator's pods to its HTTP port (the
    served pass asks each pod what it serves). For namespaces that deny ingress by default:
    any policy selecting a pod isolates it, so elsewhere it would cut the runtime off from its
    clients."""
    max_concurrent_rollouts: int = 3
    """Fleets whose runtime pods may roll at once (0: no limit). A change to another fleet's
    pod template (an operator upgrade changes them all) waits, with reason RolloutQueued, until
    fewer are mid-rollout, so the fleets' caches do not all go cold together."""
    rollout_retry_interval_s: float = 10.0
    """How often a fleet waiting for its turn (RolloutQueued) asks again: the next fleet
    starts at most this long after another's rollout finishes, and each ask is one reconcile
    of the waiting fleet."""

    allowed_images: tuple[str, ...] = ()
    """Where every container of a service must come from: registries (`registry.example.com`)
    or repositories (`registry.example.com/ml/`); a short name is Docker Hub's, as the
    container runtime reads it (`redis:7.4-alpine` is `docker.io/library/redis:7.4-alpine`).
    Empty: any image. A service asking for another is refused (reason NotAllowed) and nothing
    of it is applied."""
    allowed_service_accounts: tuple[str, ...] = ()
    """The ServiceAccounts a service's pods may run as (`default` for pods that name none, the
    managed Redis's among them). Empty: any of the namespace's."""
    external_redis_hosts: tuple[str, ...] = ()
    """Hosts (shell patterns, `*.redis.example.com`) of tenant-named external Redis the
    operator itself may dial for cache figures (cluster and Sentinel modes). Empty: none; the
    pods still use them, from their own namespace's network position."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if environ is None else environ
        return cls(
            redis_timeout_s=float(env.get("CACHEFLEET_OPERATOR_REDIS_TIMEOUT", "2")),
            redis_address=env.get("CACHEFLEET_OPERATOR_REDIS_ADDRESS") or None,
            operator_namespace=env.get("CACHEFLEET_OPERATOR_NAMESPACE")
            or DEFAULT_OPERATOR_NAMESPACE,
            runtime_image=env.get("CACHEFLEET_OPERATOR_RUNTIME_IMAGE") or RELEASE_RUNTIME_IMAGE,
            user_ids=_user_ids(env.get("CACHEFLEET_OPERATOR_USER_IDS") or "fixed"),
            resync_interval_s=float(env.get("CACHEFLEET_OPERATOR_RESYNC_INTERVAL", "300")),
            cache_figures_interval_s=float(env.get("CACHEFLEET_OPERATOR_CACHE_INTERVAL", "30")),
            cache_figures_write_interval_s=float(
                env.get("CACHEFLEET_OPERATOR_CACHE_WRITE_INTERVAL", "300")
            ),
            handler_workers=int(env.get("CACHEFLEET_OPERATOR_HANDLER_WORKERS", "16")),
            periodic_workers=int(env.get("CACHEFLEET_OPERATOR_PERIODIC_WORKERS", "4")),
            served_timeout_s=float(env.get("CACHEFLEET_OPERATOR_SERVED_TIMEOUT", "2")),
            served_concurrency=int(env.get("CACHEFLEET_OPERATOR_SERVED_CONCURRENCY", "64")),
            served_pass_budget_s=float(env.get("CACHEFLEET_OPERATOR_SERVED_BUDGET", "120")),
            runtime_network_policy=_flag(
                "CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY",
                env.get("CACHEFLEET_OPERATOR_RUNTIME_NETWORK_POLICY", "false"),
            ),
            max_concurrent_rollouts=int(
                env.get("CACHEFLEET_OPERATOR_MAX_CONCURRENT_ROLLOUTS", "3")
            ),
            rollout_retry_interval_s=float(
                env.get("CACHEFLEET_OPERATOR_ROLLOUT_RETRY_INTERVAL", "10")
            ),
            allowed_images=_listed(env.get("CACHEFLEET_OPERATOR_ALLOWED_IMAGES")),
            allowed_service_accounts=_listed(
                env.get("CACHEFLEET_OPERATOR_ALLOWED_SERVICE_ACCOUNTS")
            ),
            external_redis_hosts=_listed(env.get("CACHEFLEET_OPERATOR_EXTERNAL_REDIS_HOSTS")),
        )


def _user_ids(value: str) -> UserIds:
    if value == "fixed":
        return "fixed"
    if value == "platform":
        return "platform"
    raise ValueError(f"CACHEFLEET_OPERATOR_USER_IDS must be fixed or platform, not {value!r}")


def _listed(value: str | None) -> tuple[str, ...]:
    """A comma-separated list (blanks ignored)."""
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def _flag(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no", ""):
        return False
    raise ValueError(f"{name} must be true or false, not {value!r}")
