"""kopf handlers: tiny adapters from kopf's callbacks to the reconciler.

Loaded by ``cachefleet operator`` (``kopf run -m cachefleet.operator.handlers``). Importing this
module only registers handlers; clients are made in the startup handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import kopf

from cachefleet.operator.api_session import bounded_session
from cachefleet.operator.diff_base import LeanAnnotationsDiffBaseStorage
from cachefleet.operator.manifests.children import LISTED_KINDS
from cachefleet.operator.manifests.meta import GROUP, KIND, MANAGER, PLURAL, VERSION
from cachefleet.operator.reconcile import child_index, follow, pod_index
from cachefleet.operator.reconcile.kube import PLURALS, Kube
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.metrics import process_metrics
from cachefleet.operator.reconcile.peering import Peering, PeeringGate
from cachefleet.operator.reconcile.periodic import (
    Periodic,
    indexed_service,
    object_key,
    status_changes,
)
from cachefleet.operator.reconcile.reconciler import Event, Outcome, Reconciler, restore_child
from cachefleet.operator.reconcile.reporting import Reporter
from cachefleet.operator.reconcile.rollouts import RolloutGate, summary
from cachefleet.operator.reconcile.settings import OperatorSettings

RETRY_DELAY_S = 15.0
MAX_RETRY_DELAY_S = 600.0
MANAGED = {"app.kubernetes.io/managed-by": MANAGER}
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())
RUNTIME = {**MANAGED, "app.kubernetes.io/component": "runtime"}
#: Tries at copying an index from a handler thread while kopf's loop may be changing it.
COPY_TRIES = 20
T = TypeVar("T")
#: How long kopf waits for its own patch to come back through the watch (see ``configure``):
#: it delays only a change that arrives while the patched version has not, and a watch that
#: lags this long has other troubles.
CONSISTENCY_TIMEOUT_S = 120.0


@kopf.on.login()
async def login(
    settings: kopf.OperatorSettings, logger: Any, **_: Any
) -> kopf.AiohttpSession | None:
    """kopf's own login through the official client (which it configures for ``Kube`` too),
    with a session bounded in connections (``api_session``)."""
    credentials = kopf.login_via_client(logger=logger, settings=settings)
    return None if credentials is None else bounded_session(credentials)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
    # Keep kopf's bookkeeping in annotations: the status holds only the documented fields.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = LeanAnnotationsDiffBaseStorage(prefix=GROUP)
    # After its patch kopf waits this long for the watch to bring the patched version; past it,
    # it judges the old body again, which has no last-handled annotation yet: a whole second
    # "create" reconcile. 5 s (kopf's default) is what a watch lags behind under a burst.
    settings.persistence.consistency_timeout = CONSISTENCY_TIMEOUT_S
    # Post what a user should see (Applied, Restored, Pruned, RedisConfigured and warnings);
    # kopf's own log lines stay off the API (posting.loggers), and ``announcements`` bounds ours.
    settings.posting.level = logging.INFO
    settings.posting.loggers = False
    # Watch only the operator's own children, filtered by the API server (Secrets are not
    # watched at all: see LISTED_KINDS).
    for api_version, kind in (*LISTED_KINDS, ("v1", "Pod")):
        settings.watching.label_selectors[api_version, PLURALS[kind]] = MANAGED_SELECTOR
    operator_settings = OperatorSettings.from_environ()
    settings.execution.max_workers = max(1, operator_settings.handler_workers)
    deployments: kopf.Index[Any, Any] = kwargs["runtime_deployments"]  # the index below
    gate = RolloutGate(
        operator_settings.max_concurrent_rollouts,
        lambda: _values(deployments),
        lambda fleet: _deployment(deployments, *fleet),
    )
    metrics = process_metrics()
    pods: kopf.Index[Any, Any] = kwargs["fleet_pods"]  # the index below
    children = {kind: kwargs[child_index.index_id(PLURALS[kind])] for _, kind in LISTED_KINDS}
    memo.reconciler = Reconciler(
        Kube(metrics=metrics),
        operator_settings,
        rollouts=gate,
        pods=lambda ns, labels: _pods(pods, ns, labels),
        deployments=lambda ns, name: _deployment(deployments, ns, name),
        children=lambda ns, name, kind: _children(children[kind], ns, name),
    )
    memo.reporter = Reporter(metrics)
    metrics.leader.set(1)  # kopf runs the handlers here (with --leader-election: it leads)
    memo.locks = KeyedLocks()
    refresh = follow.StatusRefresh(memo.reconciler, memo.locks)
    memo.follower = follow.Follower(refresh, delay_s=follow.DELAY_S)
    # Resync and cache figures run in one operator-level task, not kopf timers: a timer needs a
    # finalizer on every service, and a finalizer makes deletion wait for the operator.
    periodic = Periodic(memo.reconciler, memo.locks, reporter=memo.reporter)
    index: kopf.Index[Any, Any] = kwargs["services"]  # the index below, by its id
    peering = _peering(settings, memo.reconciler.settings.operator_namespace)
    leading = PeeringGate(memo.reconciler.kube, peering)
    memo.periodic = asyncio.create_task(periodic.run(lambda: _snapshot(index), leading.active))


@kopf.on.cleanup()
async def stop_periodic(memo: kopf.Memo, **_: Any) -> None:
    process_metrics().leader.set(0)
    follower = memo.get("follower")
    if follower is not None:
        follower.close()
    task = memo.get("periodic")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


# The indexes are async: kopf runs a sync one in its handler pool, so every watch event would
# wait for a worker that a reconcile holds, and under a burst the watches fell minutes behind.


@kopf.index(GROUP, VERSION, PLURAL, id="services")
async def services(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
    """The services kopf watches (its namespaces, no list calls), for the periodic task: the
    part of each that its passes read."""
    return {(namespace, name): indexed_service(body)}


@kopf.index("apps", "v1", "deployments", labels=RUNTIME, id="runtime_deployments")
async def runtime_deployments(
    namespace: str | None, name: str, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Every fleet's live runtime Deployment (its rollout status, not its template), for the
    pacing of rollouts: kopf fills it before any handler runs, so a restarted operator knows at
    once which fleets are mid-rollout."""
    return {(namespace, name): summary(body)}


@kopf.index("v1", "pods", labels=MANAGED, id="fleet_pods")
async def fleet_pods(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Every fleet's pods by (namespace, service, component), the part the operator reads: why
    pods do not start, and which are ready at which address (the served pass), are read here,
    not listed per service."""
    return {pod_index.pod_key(namespace, labels): pod_index.pod_entry(body)}


async def fleet_children(
    namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any
) -> dict[Any, Any]:
    """Every fleet's children of one kind (an index a kind) by (namespace, service), for
    pruning: a first reconcile and a resync find them here, not by a list call per kind."""
    return {child_index.child_key(namespace, labels): child_index.child_entry(body)}


for _api_version, _kind in LISTED_KINDS:
    kopf.index(
        _api_version, PLURALS[_kind], labels=MANAGED, id=child_index.index_id(PLURALS[_kind])
    )(fleet_children)


async def follow_status(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A fleet's workload or pod changed: its service's status follows within seconds."""
    memo.follower.seen(event["type"], body)


for _api_version, _plural in (("apps/v1", "deployments"), ("apps/v1", "statefulsets"),
                              ("v1", "pods")):  # fmt: skip
    kopf.on.event(_api_version, _plural, labels=MANAGED)(follow_status)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(
    body: kopf.Body,
    patch: kopf.Patch,
    memo: kopf.Memo,
    reason: str,
    retry: int = 0,
    **_: Any,
) -> None:
    # After a spec change, a child applied a moment ago may not be in the watches' index yet.
    consistent = reason == kopf.Reason.UPDATE
    with memo.reporter.metrics.reconciling(str(reason)), memo.locks(object_key(body)):
        outcome = memo.reconciler.reconcile(body, consistent=consistent)
    events = memo.reporter.outcome(str(reason), body, outcome)
    _report(body, patch, outcome, outcome.retry_delay_s or retry_delay_s(retry), events)


async def restore(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A child was deleted or edited: re-apply it from its owner's spec.

    Judged in the event loop, as the indexes are: nearly every event is the operator's own
    apply or a controller's status write, and only a restore takes a thread."""
    if event["type"] not in ("DELETED", "MODIFIED"):
        return
    owners = [r for r in body.metadata.get("ownerReferences", []) if r.get("kind") == KIND]
    if not owners:
        return
    if event["type"] == "MODIFIED" and memo.reconciler.versions.is_own(body):
        return  # our own apply, or a controller's status update: nothing to restore
    await asyncio.to_thread(_restore, str(event["type"]), body, owners[0]["name"], memo)


def _restore(event_type: str, body: kopf.Body, owner_name: str, memo: kopf.Memo) -> None:
    """The blocking part of ``restore``: the owner read, and the child applied under its lock."""
    reconciler = memo.reconciler
    owner = reconciler.kube.get(f"{GROUP}/{VERSION}", KIND, body.metadata.namespace, owner_name)
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return  # the owner is gone: garbage collection takes the children
    with memo.reporter.metrics.reconciling("restore"), memo.locks(object_key(owner)):
        if event_type == "MODIFIED" and reconciler.versions.is_own(body):
            return
        written = restore_child(reconciler, owner, body["kind"], body.metadata.name)
    memo.reporter.metrics.reconciles.labels("restore", "ok").inc()
    message = f"restored {', '.join(written)}"
    if written and memo.reporter.events.admit(owner, "Restored", message):
        kopf.info(owner, reason="Restored", message=message)


for _api_version, _kind in LISTED_KINDS:
    kopf.on.event(_api_version, PLURALS[_kind], labels=MANAGED)(restore)


def retry_delay_s(retry: int) -> float:
    """15 s, then doubling up to 10 min: a reconcile that keeps failing (an API server
    refusing, a Redis away) must not cost its requests every 15 s for as long as it fails."""
    return float(min(RETRY_DELAY_S * 2 ** min(retry, 10), MAX_RETRY_DELAY_S))


def _report(
    body: kopf.Body,
    patch: kopf.Patch,
    outcome: Outcome,
    delay_s: float = RETRY_DELAY_S,
    events: list[Event] | None = None,
) -> None:
    """Status changes into kopf's patch, ``events`` (the outcome's by default) posted."""
    for key, value in status_changes(body.get("status") or {}, outcome.status).items():
        patch.status[key] = value
    for event in outcome.events if events is None else events:
        post = kopf.warn if event.warning else kopf.info
        post(body, reason=event.reason, message=event.message)
    if outcome.retry is not None:
        raise kopf.TemporaryError(outcome.retry, delay=delay_s)


def _snapshot(index: kopf.Index[Any, Any]) -> list[Mapping[str, Any]]:
    return [body for store in index.values() for body in store]


def _copied(read: Callable[[], T]) -> T:
    """``read()`` of an index from a handler thread: kopf updates its indexes in its event loop,
    so a change in the middle of the read starts it again."""
    for _ in range(COPY_TRIES):
        try:
            return read()
        except (RuntimeError, KeyError):  # changed size, or a key dropped, during the read
            continue
    return read()


def _values(index: kopf.Index[Any, Any]) -> list[Mapping[str, Any]]:
    return _copied(lambda: _snapshot(index))


def _pods(index: kopf.Index[Any, Any], namespace: str, labels: Mapping[str, str]) -> list[Any]:
    key = pod_index.pod_key(namespace, labels)
    return _copied(lambda: list(index.get(key, ())))


def _deployment(index: kopf.Index[Any, Any], namespace: str, name: str) -> Mapping[str, Any] | None:
    return _copied(lambda: next(iter(index.get((namespace, name), ())), None))


def _children(index: kopf.Index[Any, Any], namespace: str, name: str) -> list[Any]:
    return _copied(lambda: list(index.get((namespace, name), ())))


def _peering(settings: kopf.OperatorSettings, operator_namespace: str) -> Peering:
    """kopf's peering settings (from the command line) for the periodic task's gate.

    A namespaced peering object is looked for in the operator's own namespace; with -A (the
    chart's default) kopf's peering is cluster-wide.
    """
    return Peering(
        standalone=settings.peering.standalone,
        name=settings.peering.name,
        priority=settings.peering.priority,
        clusterwide=settings.peering.clusterwide,
        namespace=operator_namespace,
    )
