"""One reconciliation of a CachedInferenceService: children, live Redis settings, status.

Returns what the handler should write (status) and say (events) and whether to retry; it never
raises on a bad spec (Stalled) or a failed API call or Redis command (Reconciling, retried).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.children import build_children, needs_generated_password
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import Owner
from cachefleet.operator.manifests.redis import password_ref
from cachefleet.operator.manifests.redis_memory import maxmemory_bytes
from cachefleet.operator.manifests.runtime import redis_url
from cachefleet.operator.manifests.spec import ServiceSpec, parse_spec
from cachefleet.operator.reconcile import observe
from cachefleet.operator.reconcile.children import apply_children, prune_children
from cachefleet.operator.reconcile.conditions import (
    Condition,
    render_conditions,
    stalled_conditions,
    summary_conditions,
)
from cachefleet.operator.reconcile.kube import Kube, KubeError
from cachefleet.operator.reconcile.passwords import existing_or_new_password, read_secret_key
from cachefleet.operator.reconcile.redis_live import (
    RedisAddress,
    RedisLiveError,
    apply_memory_settings,
    read_cache_figures,
)
from cachefleet.operator.reconcile.redis_topology import ExternalRedis, read_topology_figures
from cachefleet.operator.reconcile.settings import OperatorSettings


@dataclass(frozen=True)
class Event:
    warning: bool
    reason: str
    message: str


@dataclass
class Outcome:
    """What one reconciliation found: the status to write, events to post, whether to retry."""

    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    retry: str | None = None


@dataclass(frozen=True)
class Reconciler:
    kube: Kube
    settings: OperatorSettings

    def reconcile(self, body: Mapping[str, Any]) -> Outcome:
        """Apply, prune, configure Redis live and observe; API failures become a retried status."""
        try:
            return self._reconcile(body)
        except KubeError as error:
            message = f"Kubernetes API call failed: {error}; retrying"
            unknown = "not observed: the last reconcile failed"
            conditions = summary_conditions(
                Condition("RedisReady", False, "NotObserved", unknown),
                Condition("RuntimeReady", False, "NotObserved", unknown),
                problem=message,
            )
            status = self._status(body, conditions)
            return Outcome(status, [Event(True, "ApplyFailed", message)], retry=message)

    def _reconcile(self, body: Mapping[str, Any]) -> Outcome:
        owner = Owner.from_body(body)
        try:
            spec = parse_spec(body.get("spec") or {})
            password = self.generated_password(spec, owner)
            children = build_children(spec, owner=owner, redis_password=password)
        except SpecError as error:
            message = f"invalid spec: {error}"
            status = self._status(body, stalled_conditions(message))
            return Outcome(status, [Event(True, "InvalidSpec", message)])
        events = [
            Event(False, "Applied", f"applied {x}") for x in apply_children(self.kube, children)
        ]
        events += [
            Event(False, "Pruned", f"deleted {x}")
            for x in prune_children(self.kube, owner, children)
        ]
        return self._observe(body, spec, owner, events)

    def _observe(
        self, body: Mapping[str, Any], spec: ServiceSpec, owner: Owner, events: list[Event]
    ) -> Outcome:
        statefulset = None
        if spec.cache.managed_redis:
            statefulset = self.kube.get(
                "apps/v1", "StatefulSet", owner.namespace, meta.redis_name(owner)
            )
        redis = observe.redis_condition(statefulset, managed=spec.cache.managed_redis)
        problem = None
        if redis.status and spec.cache.managed_redis:
            problem = self._apply_live_memory(spec, owner, events)
        if problem is not None:
            redis = Condition("RedisReady", False, "ConfigSetFailed", problem)
        deployment = self.kube.get("apps/v1", "Deployment", owner.namespace, owner.name)
        runtime = observe.runtime_condition(deployment)
        replicas, ready = observe.replica_counts(deployment)
        status = self._status(body, summary_conditions(redis, runtime, problem=problem))
        status.update(
            replicas=replicas,
            readyReplicas=ready,
            selector=meta.label_selector(owner, "runtime"),
            url=meta.service_url(owner),
            redisUrl=redis_url(spec, owner=owner) or "",
        )
        return Outcome(status, events, retry=problem)

    def _apply_live_memory(
        self, spec: ServiceSpec, owner: Owner, events: list[Event]
    ) -> str | None:
        """CONFIG SET maxmemory and its policy on the running Redis; a message when it failed."""
        redis = spec.cache.redis
        try:
            changed = apply_memory_settings(
                self.redis_address(spec, owner),
                maxmemory_bytes=maxmemory_bytes(redis),
                policy=redis.maxmemory_policy,
            )
        except RedisLiveError as error:
            events.append(Event(True, "ConfigSetFailed", str(error)))
            return f"{error}; retrying"
        if changed:
            message = (
                f"set maxmemory {maxmemory_bytes(redis)} and policy {redis.maxmemory_policy} live"
            )
            events.append(Event(False, "RedisConfigured", message))
        return None

    def cache_figures(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """Redis INFO figures for the status: from the managed Redis, or from an external
        cluster's primaries or Sentinel's primary; None when there is nothing to ask."""
        owner = Owner.from_body(body)
        try:
            spec = parse_spec(body.get("spec") or {})
        except SpecError:
            return None
        external = spec.cache.redis.external
        if spec.cache.uses_redis and external is not None and external.mode != "standalone":
            return read_topology_figures(self.external_redis(spec, owner)).to_status()
        if not spec.cache.managed_redis:
            return None
        figures = read_cache_figures(self.redis_address(spec, owner))
        return figures.to_status()

    def redis_address(self, spec: ServiceSpec, owner: Owner) -> RedisAddress:
        """The managed Redis through its client Service (or the development override)."""
        ref = password_ref(spec, owner)
        password = None
        if ref is not None:
            password = read_secret_key(self.kube, owner.namespace, ref.name, ref.key)
        host, port = f"{meta.redis_name(owner)}.{owner.namespace}.svc", meta.REDIS_PORT
        if self.settings.redis_address:
            host, _, raw_port = self.settings.redis_address.rpartition(":")
            port = int(raw_port)
        return RedisAddress(host, port, password, self.settings.redis_timeout_s)

    def external_redis(self, spec: ServiceSpec, owner: Owner) -> ExternalRedis:
        """The external Redis of ``spec``, with its password read from its Secret."""
        external = spec.cache.redis.external
        assert external is not None
        ref = external.password_secret_ref
        password = None
        if ref is not None:
            password = read_secret_key(self.kube, owner.namespace, ref.name, ref.key)
        return ExternalRedis(
            external.url,
            external.mode,
            external.sentinel_master,
            password,
            self.settings.redis_timeout_s,
        )

    def generated_password(self, spec: ServiceSpec, owner: Owner) -> str | None:
        if not needs_generated_password(spec):
            return None
        return existing_or_new_password(self.kube, owner)

    @staticmethod
    def _status(body: Mapping[str, Any], conditions: list[Condition]) -> dict[str, Any]:
        generation = (body.get("metadata") or {}).get("generation")
        previous = (body.get("status") or {}).get("conditions")
        status: dict[str, Any] = {
            "conditions": render_conditions(conditions, generation=generation, previous=previous)
        }
        if generation is not None:
            status["observedGeneration"] = generation
        return status


def restore_child(
    reconciler: Reconciler, owner_body: Mapping[str, Any], kind: str, name: str
) -> list[str]:
    """Re-apply one child after a watch saw it deleted or edited; returns what was written."""
    owner = Owner.from_body(owner_body)
    try:
        spec = parse_spec(owner_body.get("spec") or {})
        password = reconciler.generated_password(spec, owner)
        children = build_children(spec, owner=owner, redis_password=password)
    except SpecError:
        return []  # the owner's own handler reports the spec problem
    if kind == "Secret" and name == meta.redis_auth_secret_name(owner):
        # A lost password Secret means a new password: every pod that reads it must roll now.
        return apply_children(reconciler.kube, children)
    wanted = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
    return apply_children(reconciler.kube, wanted)
