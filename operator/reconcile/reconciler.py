"""One reconciliation of a CachedInferenceService: children, live Redis settings, status.

Returns what the handler should write (status) and say (events) and whether to retry; it never
raises on a bad spec (Stalled) or a failed API call or Redis command (Reconciling, retried).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from cachefleet.operator.manifests import meta
from cachefleet.operator.manifests.autoscaling import SCALER_KINDS
from cachefleet.operator.manifests.children import (
    LISTED_KINDS,
    build_children,
    needs_generated_password,
    uses_redis_password,
)
from cachefleet.operator.manifests.errors import SpecError
from cachefleet.operator.manifests.meta import MANAGER, Owner
from cachefleet.operator.manifests.redis import password_ref
from cachefleet.operator.manifests.redis_memory import maxmemory_bytes
from cachefleet.operator.manifests.runtime import redis_password_ref, redis_url
from cachefleet.operator.manifests.spec import ReadSpec, ServiceSpec, parse_spec, read_spec
from cachefleet.operator.manifests.tls import tls_digest
from cachefleet.operator.reconcile import fleet_secret, observe, pod_problems, redis_restarts
from cachefleet.operator.reconcile.admission import check_allowed
from cachefleet.operator.reconcile.announcements import announced
from cachefleet.operator.reconcile.applied import AppliedVersions
from cachefleet.operator.reconcile.children import (
    Applied,
    LiveChildren,
    apply_children,
    prune_children,
)
from cachefleet.operator.reconcile.conditions import (
    Condition,
    queued_conditions,
    render_conditions,
    stalled_conditions,
    summary_conditions,
)
from cachefleet.operator.reconcile.fleet_secret import share
from cachefleet.operator.reconcile.kube import Kube, KubeError
from cachefleet.operator.reconcile.passwords import (
    existing_or_new_password,
    password_secret_replaced,
    pin_password_secret,
    read_secret_key,
)
from cachefleet.operator.reconcile.redis_live import (
    RedisAddress,
    RedisLiveError,
    apply_memory_settings,
    read_cache_figures,
)
from cachefleet.operator.reconcile.redis_topology import ExternalRedis, read_topology_figures
from cachefleet.operator.reconcile.refusals import Refused
from cachefleet.operator.reconcile.rollouts import (
    Decision,
    RolloutGate,
    with_live_template,
)
from cachefleet.operator.reconcile.runtime_configs import NeededConfigs
from cachefleet.operator.reconcile.served import PodDialer, read_served
from cachefleet.operator.reconcile.served_access import served_access
from cachefleet.operator.reconcile.settings import OperatorSettings
from cachefleet.operator.reconcile.tls_secret import read_tls_secret
from cachefleet.operator.reconcile.upstream_sources import read_upstream_digest

#: The reason of a service whose children need an API the cluster does not serve (KEDA).
NOT_INSTALLED = "NotInstalled"
#: The reason of the warning on a service whose stored spec holds fields this operator ignores.
UNKNOWN_FIELDS = "UnknownFields"


def _ignored_message(read: ReadSpec) -> str:
    return (
        f"ignored {read.describe_ignored()}: this operator's release does not know them (a "
        "typo, or a newer release's CRD?); the service is reconciled without them, with the "
        "defaults where they would have set something"
    )


@dataclass(frozen=True)
class Event:
    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class Decided:
    """What a service's last full reconcile decided that the live objects do not show: a
    status refresh (``Reconciler.refresh``) keeps it until the next reconcile."""

    generation: int | None
    blocked: tuple[str, ...] = ()
    unserved: tuple[str, ...] = ()
    queued: str | None = None


@dataclass
class Observed:
    """What the children are doing, read from the live objects (``Reconciler._observe``)."""

    redis: Condition
    runtime: Condition
    #: Why pods are refused, where the API says (a quota, an admission webhook).
    refusals: list[observe.Refusal]
    replicas: int
    ready: int


PodSource = Callable[[str, Mapping[str, str]], Sequence[Mapping[str, Any]]]
"""The pods of a namespace that carry all the given labels (the operator's handlers read kopf's
index of the fleets' pods; without one, the API is asked)."""

ChildSource = Callable[[str, str, str], Sequence[Mapping[str, Any]]]
"""A service's live children of one kind, by (namespace, service, kind), each with its name and
owners (the handlers read kopf's index of the child watches: ``child_index``)."""

DeploymentSource = Callable[[str, str], Mapping[str, Any] | None]
"""A runtime Deployment's rollout status (generation, replicas, status) by namespace and name,
None when it is not known there (the handlers read kopf's index of the runtime Deployments)."""


@dataclass
class Outcome:
    """What one reconciliation found: the status to write, events to post, whether to retry."""

    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    retry: str | None = None
    #: When to retry, where the handler's backoff would wait too long (a queued rollout).
    retry_delay_s: float | None = None


@dataclass(frozen=True)
class Reconciler:
    kube: Kube
    settings: OperatorSettings
    versions: AppliedVersions = field(default_factory=AppliedVersions)
    #: The Redis password each service's last reconcile read, by (namespace, name).
    passwords: dict[tuple[str, str], str | None] = field(default_factory=dict)
    #: Paces pod template changes across fleets; off unless given one (the operator's handlers
    #: give one that reads kopf's index of the live runtime Deployments).
    rollouts: RolloutGate = field(default_factory=lambda: RolloutGate(0))
    #: Where the pods are read from: the handlers' watch index, else a list call.
    pods: PodSource | None = None
    #: Where a status refresh reads the runtime Deployment: the handlers' watch index, else a get.
    deployments: DeploymentSource | None = None
    #: Where pruning finds the live children: the handlers' watch index, else a list per kind.
    children: ChildSource | None = None
    #: Each service's last full reconcile's decisions, by (namespace, name), for ``refresh``.
    decided: dict[tuple[str, str], Decided] = field(default_factory=dict)

    def reconcile(self, body: Mapping[str, Any], *, consistent: bool = True) -> Outcome:
        """Apply, prune, configure Redis live and observe; API failures become a status.

        Every reconcile prunes the children the spec does not ask for: a first one too (an
        operator stopped in the middle of one may have applied children that the spec, changed
        meanwhile, dropped), and a resync, which so catches what a missed one left. The live
        children come from the watches' index (``children``) unless ``consistent``: then from a
        list call per kind, as after a spec change, when a child this process applied a moment
        ago may not have reached the index yet. The handlers' first reconcile and the resync
        read the index: kopf fills it before any handler runs, and a service new to this
        process has no child it applied.
        """
        owner = Owner.from_body(body)
        self.decided.pop((owner.namespace, owner.name), None)  # only a finished one leaves one
        try:
            try:
                return self._reconcile(body, consistent=consistent)
            except KubeError as error:
                if not password_secret_replaced(error):
                    raise
                # The password's Secret went after it was read: once more, with a new one.
                return self._reconcile(body, consistent=consistent)
        except KubeError as error:
            self.decided.pop((owner.namespace, owner.name), None)
            if error.namespace_terminating:
                # The namespace is going, the service and its children with it: nothing to do,
                # nothing to report (a status write would only race the deletion).
                return Outcome({})
            unknown = "not observed: the last reconcile failed"
            redis = Condition("RedisReady", False, "NotObserved", unknown)
            runtime = Condition("RuntimeReady", False, "NotObserved", unknown)
            if error.invalid:
                # The server refused a child as invalid: retrying the same request cannot help.
                message = f"the Kubernetes API refused a child: {error}"
                conditions = summary_conditions(redis, runtime, problem=None, stalled=message)
                status = self._status(body, conditions)
                return Outcome(status, [Event(True, "ReconcileFailed", message)])
            message = f"Kubernetes API call failed: {error}; retrying"
            conditions = summary_conditions(redis, runtime, problem=message)
            status = self._status(body, conditions)
            return Outcome(status, [Event(True, "ApplyFailed", message)], retry=message)

    def _reconcile(self, body: Mapping[str, Any], *, consistent: bool) -> Outcome:
        owner = Owner.from_body(body)
        try:
            read = read_spec(body.get("spec") or {})
            spec = read.spec
            password, keys, children = self.wanted_children(spec, owner, body)
        except SpecError as error:
            reason = error.reason if isinstance(error, Refused) else "InvalidSpec"
            message = str(error) if isinstance(error, Refused) else f"invalid spec: {error}"
            status = self._status(body, stalled_conditions(message, reason))
            return Outcome(status, [Event(True, reason, message)])
        share(self.kube, owner, keys)
        # Fields of a newer release's CRD (applied first, or kept after a rollback): reconciled
        # without them, and said so on the object.
        ignored = [Event(True, UNKNOWN_FIELDS, _ignored_message(read))] if read.ignored else []
        pruned: list[str] = []
        deferral = self.defer_redis_restarts(owner, children)
        found = self._children_of(owner, consistent=consistent)
        applied, decision = self.apply_paced(
            owner, deferral.children, lambda paced: self._apply(owner, paced, found, pruned)
        )
        # One event per kind of change, naming what changed (not one per child).
        written = announced(body, applied.written, applied.first_seen)
        events = [Event(False, "Applied", f"applied {', '.join(written)}")] if written else []
        if deferral.began is not None:
            events.append(Event(False, redis_restarts.DEFERRED, deferral.began))
        events += [Event(False, "Pruned", f"deleted {', '.join(pruned)}")] if pruned else []
        for message in applied.blocked:
            events.append(Event(True, "ImmutableField", message))
        for message in applied.unserved:
            events.append(Event(True, NOT_INSTALLED, message))
        queued = None if decision.proceed else decision.message
        generation = (body.get("metadata") or {}).get("generation")
        self.decided[(owner.namespace, owner.name)] = Decided(
            generation, tuple(applied.blocked), tuple(applied.unserved), queued
        )
        return self._settle(body, spec, owner, password, applied, ignored + events, queued)

    def refresh(self, body: Mapping[str, Any]) -> Outcome | None:
        """The status from the live children and pods, with what the last full reconcile of
        this generation decided (no apply); None when there is no such reconcile (it failed,
        the spec changed since, or this process has not reconciled the service yet): the
        handlers' reconcile writes the status then."""
        owner = Owner.from_body(body)
        decided = self.decided.get((owner.namespace, owner.name))
        generation = (body.get("metadata") or {}).get("generation")
        if decided is None or decided.generation != generation:
            return None
        try:
            spec = parse_spec(body.get("spec") or {})
        except SpecError:
            return None
        applied = Applied(blocked=list(decided.blocked), unserved=list(decided.unserved))
        return self._settle(body, spec, owner, None, applied, [], decided.queued)

    def apply_paced(
        self,
        owner: Owner,
        children: list[dict[str, Any]],
        apply: Callable[[list[dict[str, Any]]], Applied],
    ) -> tuple[Applied, Decision]:
        """``apply`` the children, the runtime Deployment's pod template only when the pacing
        of rollouts admits it (else the live one is kept: see ``rollouts``)."""
        fleet = (owner.namespace, owner.name)
        deployment = next((c for c in children if c["kind"] == "Deployment"), None)
        if deployment is None:
            return apply(children), Decision(True)
        with self.rollouts.admit(fleet, deployment) as decision:
            if not decision.proceed:
                children = [self._keep_live_template(c) if c is deployment else c
                            for c in children]  # fmt: skip
            applied = apply(children)
            if decision.proceed:
                self.rollouts.applied(fleet, applied.live.get(f"Deployment/{owner.name}") or {})
        return applied, decision

    def defer_redis_restarts(
        self, owner: Owner, children: list[dict[str, Any]]
    ) -> redis_restarts.Deferral:
        """The children with the Redis StatefulSet's update strategy decided from its pod (see
        ``redis_restarts``: a change only of the password's delivery waits for its restart)."""
        if not any(c["kind"] == "StatefulSet" for c in children):
            return redis_restarts.Deferral(children)
        pods = self._pods_of(owner, "redis")
        return redis_restarts.defer_redis_restarts(self.kube, children, pods)

    def _apply(
        self, owner: Owner, children: list[dict[str, Any]], found: LiveChildren, pruned: list[str]
    ) -> Applied:
        """Apply every child, and delete those the spec dropped (into ``pruned``; scalers first:
        KEDA refuses a ScaledObject for a Deployment another HPA scales, and two scalers would
        fight over the count), keeping runtime ConfigMaps pods may still read."""
        pruned += prune_children(self.kube, found, owner, children, SCALER_KINDS)
        applied = apply_children(self.kube, children, self.versions)
        others = [k for k in LISTED_KINDS if k not in SCALER_KINDS]
        keep = NeededConfigs(self.kube, owner, applied.live.get(f"Deployment/{owner.name}"))
        pruned += prune_children(self.kube, found, owner, children, others, keep=keep)
        return applied

    def _children_of(self, owner: Owner, *, consistent: bool) -> LiveChildren:
        """The owner's live children by kind: from the watches' index, or listed."""
        if self.children is not None and not consistent:
            index = self.children
            return lambda _, kind: index(owner.namespace, owner.name, kind)
        labels = {"app.kubernetes.io/instance": owner.name, "app.kubernetes.io/managed-by": MANAGER}
        return lambda api_version, kind: self.kube.list_labelled(
            api_version, kind, owner.namespace, labels
        )

    def _keep_live_template(self, deployment: dict[str, Any]) -> dict[str, Any]:
        """``deployment`` with the live pod template: a queued fleet keeps what it runs."""
        meta = deployment["metadata"]
        live = self.kube.get("apps/v1", "Deployment", meta["namespace"], meta["name"])
        return deployment if live is None else with_live_template(deployment, live)

    def wanted_children(
        self, spec: ServiceSpec, owner: Owner, body: Mapping[str, Any]
    ) -> tuple[str | None, fleet_secret.FleetKeys, list[dict[str, Any]]]:
        """The Redis password, the fleet keys and the children they go into, as a reconcile and
        a restore apply them: the fleet Secret left out when another service made it, and the
        generated password's Secret pinned to the one its password was read from."""
        password, read_from = self.redis_password(spec, owner)
        keys = self.fleet_keys(spec, owner, body)
        children = self.build(spec, owner, password, keys.cache_secret, keys.admin_token)
        return password, keys, pin_password_secret(keys.keep(children, owner), owner, read_from)

    def build(
        self,
        spec: ServiceSpec,
        owner: Owner,
        password: str | None,
        cache_secret: str | None = None,
        admin_token: str | None = None,
    ) -> list[dict[str, Any]]:
        """The children, for an operator running in this operator's namespace (the runtime's
        TLS Secret, and the upstream's Secret and CA, read for their digests); refused (see
        ``admission``) when the operator's allow-lists do not admit their pods."""
        children = build_children(
            spec,
            owner=owner,
            redis_password=password,
            cache_secret=cache_secret,
            operator_namespace=self.settings.operator_namespace,
            admin_token=admin_token,
            runtime_image=self.settings.runtime_image,
            user_ids=self.settings.user_ids,
            tls_digest=tls_digest(read_tls_secret(self.kube, owner.namespace, spec)),
            runtime_access=self.settings.runtime_network_policy,
            upstream_digest=read_upstream_digest(self.kube, owner.namespace, spec),
        )
        check_allowed(children, self.settings)
        return children

    def fleet_keys(
        self, spec: ServiceSpec, owner: Owner, body: Mapping[str, Any]
    ) -> fleet_secret.FleetKeys:
        """The cache secret and admin token the pods read (see ``fleet_secret``)."""
        annotations = (body.get("metadata") or {}).get("annotations") or {}
        return fleet_secret.read_fleet_keys(self.kube, spec, owner, annotations)

    def _settle(
        self,
        body: Mapping[str, Any],
        spec: ServiceSpec,
        owner: Owner,
        password: str | None,
        applied: Applied,
        events: list[Event],
        queued: str | None = None,
    ) -> Outcome:
        """What the children are doing (:meth:`_observe`, reads only), Redis's live settings
        brought to the spec once it is ready (:meth:`_apply_live_settings`, the one write
        after the apply), and the status both make (:meth:`_report`)."""
        observed = self._observe(spec, owner, applied)
        problem = self._apply_live_settings(spec, owner, password, observed.redis, events)
        if problem is not None:
            observed.redis = Condition("RedisReady", False, "ConfigSetFailed", problem)
        return self._report(body, spec, owner, applied, observed, events, queued, problem)

    def _observe(self, spec: ServiceSpec, owner: Owner, applied: Applied) -> Observed:
        """The children's conditions and counts, as the apply returned them or read back:
        reads only."""
        refusals: list[observe.Refusal] = []
        redis = self._observe_redis(spec, owner, applied, refusals)
        deployment = applied.live.get(f"Deployment/{owner.name}") or self._deployment(owner)
        floor = spec.autoscaling.min_replicas if spec.autoscaling is not None else 0
        runtime = observe.runtime_condition(deployment, floor=floor)
        refused = observe.deployment_refusal(deployment)
        failing = None if runtime.status else self._pod_problem(owner, "runtime", "RuntimeReady")
        if failing is not None:  # before a progress deadline it also causes
            runtime = failing
        elif refused is not None and not runtime.status:
            runtime = refused.condition("RuntimeReady")
            refusals.append(refused)
        replicas, ready = observe.replica_counts(deployment)
        return Observed(redis, runtime, refusals, replicas, ready)

    def _observe_redis(
        self, spec: ServiceSpec, owner: Owner, applied: Applied, refusals: list[observe.Refusal]
    ) -> Condition:
        """The managed Redis's condition (why its pods are refused, into ``refusals``)."""
        managed = spec.cache.managed_redis
        statefulset = None
        if managed:
            name = meta.redis_name(owner)
            statefulset = self._live(applied, "apps/v1", "StatefulSet", name, owner)
        redis = observe.redis_condition(statefulset, managed=managed)
        if statefulset is None:
            return redis
        if redis.reason == "Starting":
            found = observe.statefulset_refusal(
                self.kube.list_events(owner.namespace, "StatefulSet", meta.redis_name(owner))
            )
            if found is not None:
                redis = found.condition("RedisReady")
                refusals.append(found)
        if redis.reason in ("Starting", "Restarting"):
            redis = self._pod_problem(owner, "redis", "RedisReady") or redis
        persistence = spec.cache.redis.persistence_or_default
        if redis.status and persistence.enabled:
            claim = self.kube.get(
                "v1", "PersistentVolumeClaim", owner.namespace, meta.redis_claim_name(owner)
            )
            redis = observe.volume_condition(redis, claim, str(persistence.size))
        return redis

    def _report(
        self,
        body: Mapping[str, Any],
        spec: ServiceSpec,
        owner: Owner,
        applied: Applied,
        observed: Observed,
        events: list[Event],
        queued: str | None,
        problem: str | None,
    ) -> Outcome:
        """The status and events of what was applied and observed."""
        lasting = [f"pods are refused: {r.message}" for r in observed.refusals if r.lasting]
        stalled = "; ".join([*applied.blocked, *applied.unserved, *lasting]) or None
        reason = "ReconcileFailed"
        if applied.unserved and not applied.blocked:
            reason = NOT_INSTALLED
        elif lasting and not applied.blocked:
            reason = observe.REFUSED
        conditions = summary_conditions(
            observed.redis, observed.runtime, problem=problem, stalled=stalled,
            stalled_reason=reason,
        )  # fmt: skip
        if queued is not None and stalled is None:
            conditions = queued_conditions(conditions, queued)
        status = self._status(body, conditions)
        status.update(
            replicas=observed.replicas,
            readyReplicas=observed.ready,
            selector=meta.label_selector(owner, "runtime"),
            url=meta.service_url(owner, https=spec.runtime.tls is not None),
            redisUrl=redis_url(spec, owner=owner) or "",
        )
        if problem is None and queued is not None and stalled is None:
            return Outcome(
                status, events, retry=queued, retry_delay_s=self.settings.rollout_retry_interval_s
            )
        return Outcome(status, events, retry=problem)

    def _pod_problem(self, owner: Owner, component: str, condition: str) -> Condition | None:
        """The component's condition from why its pods do not start (a failed download, a
        missing Secret, an image pull, a volume, an eviction), if they say."""
        pods = self._pods_of(owner, component)

        def events_of(name: str) -> list[dict[str, Any]]:
            return self.kube.list_events(owner.namespace, "Pod", name)

        return pod_problems.pod_problem(condition, pods, events_of=events_of)

    def _pods_of(self, owner: Owner, component: str) -> Sequence[Mapping[str, Any]]:
        """The component's pods: from the pod index when there is one, else listed."""
        labels = meta.selector_labels(owner, component)
        if self.pods is not None:
            return self.pods(owner.namespace, labels)
        return self.kube.list_labelled("v1", "Pod", owner.namespace, labels)

    def _deployment(self, owner: Owner) -> Mapping[str, Any] | None:
        """The runtime Deployment when no apply returned it (a status refresh): from the watch
        index if it knows it, else read. A refresh follows a watch event of the Deployment or
        its pods, and kopf indexes an event before its handlers see it, so the index holds at
        least what the refresh was marked for; a later change marks it again."""
        if self.deployments is not None:
            found = self.deployments(owner.namespace, owner.name)
            if found is not None:
                return found
        return self.kube.get("apps/v1", "Deployment", owner.namespace, owner.name)

    def _live(
        self, applied: Applied, api_version: str, kind: str, name: str, owner: Owner
    ) -> dict[str, Any] | None:
        """The child as the apply returned it (status included), else read back."""
        found = applied.live.get(f"{kind}/{name}")
        if found is not None:
            return found
        return self.kube.get(api_version, kind, owner.namespace, name)

    def _apply_live_settings(
        self,
        spec: ServiceSpec,
        owner: Owner,
        password: str | None,
        observed: Condition,
        events: list[Event],
    ) -> str | None:
        """CONFIG SET maxmemory and its policy on the managed Redis once it is ready
        (``observed``: its condition); a message when it failed."""
        if not (observed.status and spec.cache.managed_redis):
            return None
        redis = spec.cache.redis
        try:
            changed = apply_memory_settings(
                self.redis_address(spec, owner, password),
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
            if not self.settings.external_redis_hosts:
                return None  # tenant-named hosts are dialled only where the platform allows
            return read_topology_figures(self.external_redis(spec, owner)).to_status()
        if not spec.cache.managed_redis:
            return None
        figures = read_cache_figures(self.redis_address(spec, owner))
        return figures.to_status()

    def served(self, body: Mapping[str, Any]) -> list[dict[str, str]] | None:
        """What each ready runtime pod serves (its model's fingerprint); None on a bad spec.

        The pods come from the pod index (no list call per service and pass); the only API
        reads are the Secrets a TLS or restricted fleet is asked with."""
        owner = Owner.from_body(body)
        try:
            spec = parse_spec(body.get("spec") or {})
        except SpecError:
            return None
        pods = self._pods_of(owner, "runtime")
        access = served_access(self.kube, owner, spec)
        return read_served(pods, spec.model.name, access, self.dialer)

    @cached_property
    def dialer(self) -> PodDialer:
        """The pods' dialer of the served passes (its threads start on first use)."""
        return PodDialer(
            timeout_s=self.settings.served_timeout_s,
            concurrency=self.settings.served_concurrency,
        )

    def redis_address(
        self, spec: ServiceSpec, owner: Owner, password: str | None = None
    ) -> RedisAddress:
        """The managed Redis through its client Service (or the development override)."""
        ref = password_ref(spec, owner)
        if ref is None:
            password = None
        elif password is None:
            # The one the last reconcile read (every resync reads it again): the figures pass
            # runs every 30 s per service and needs no Secret read of its own.
            password = self.passwords.get((owner.namespace, owner.name))
            if password is None:
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
            self.settings.external_redis_hosts,
        )

    def redis_password(self, spec: ServiceSpec, owner: Owner) -> tuple[str | None, str | None]:
        """The Redis password the pods will read: generated, or from the user's Secret; and
        the uid of the generated Secret it was read from (None when new, or the user's).

        Its digest rolls the pods when it changes, so a rotated user password reaches both
        Redis and the runtime (None when there is none, or the user's Secret is not there yet).
        """
        password = read_from = None
        if needs_generated_password(spec):
            generated = existing_or_new_password(self.kube, owner)
            password, read_from = generated.value, generated.read_from
        elif uses_redis_password(spec):
            ref = redis_password_ref(spec, owner=owner)
            if ref is not None:
                password = read_secret_key(self.kube, owner.namespace, ref.name, ref.key)
        self.passwords[(owner.namespace, owner.name)] = password
        return password, read_from

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
        _, _, children = reconciler.wanted_children(spec, owner, owner_body)
        generated = (
            meta.redis_auth_secret_name(owner),
            meta.cache_secret_name(owner),
        )
        if not (kind == "Secret" and name in generated):
            # (A lost generated Secret means a new secret: every pod that reads it must roll.)
            children = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
        # (A restored Deployment is paced like any other change to its pods, and a restored
        # StatefulSet waits for its pod's restart as in any other reconcile.)
        children = reconciler.defer_redis_restarts(owner, children).children
        applied, _ = reconciler.apply_paced(
            owner,
            children,
            lambda paced: apply_children(reconciler.kube, paced, reconciler.versions),
        )
        return [x for x in applied.written if x not in applied.first_seen]
    except Refused as refusal:
        # The cause came with this child (a fleet Secret deleted): said on the service at once,
        # not at the next resync, minutes away. (A bad spec is its own handler's to report.)
        conditions = stalled_conditions(str(refusal), refusal.reason)
        reconciler.kube.patch_status(owner_body, Reconciler._status(owner_body, conditions))
        return []
    except SpecError:
        return []  # the owner's own handler reports the spec problem
    except KubeError as error:
        if error.namespace_terminating:
            return []  # the namespace is being deleted: its children go, as they should
        raise
