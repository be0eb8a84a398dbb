"""kopf handlers: tiny adapters from kopf's callbacks to the reconciler.

Loaded by ``cachefleet operator`` (``kopf run -m cachefleet.operator.handlers``). Importing this
module only registers handlers; clients are made in the startup handler.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from cachefleet.operator.manifests.children import CHILD_KINDS
from cachefleet.operator.manifests.meta import GROUP, KIND, MANAGER, PLURAL, VERSION
from cachefleet.operator.reconcile.conditions import timestamp_now
from cachefleet.operator.reconcile.kube import PLURALS, Kube, KubeError
from cachefleet.operator.reconcile.locks import KeyedLocks
from cachefleet.operator.reconcile.reconciler import Outcome, Reconciler, restore_child
from cachefleet.operator.reconcile.redis_live import RedisLiveError
from cachefleet.operator.reconcile.settings import OperatorSettings

RESYNC_INTERVAL_S = 60.0
CACHE_FIGURES_INTERVAL_S = 30.0
RETRY_DELAY_S = 15.0
MANAGED = {"app.kubernetes.io/managed-by": MANAGER}
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED.items())


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: the status holds only the documented fields.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.posting.level = logging.WARNING
    # Watch only the operator's own children, filtered by the API server: a cluster-wide watch
    # of every Secret (Helm's release Secrets included) would fill the operator's memory.
    for api_version, kind in CHILD_KINDS:
        settings.watching.label_selectors[api_version, PLURALS[kind]] = MANAGED_SELECTOR
    memo.reconciler = Reconciler(Kube(), OperatorSettings.from_environ())
    memo.locks = KeyedLocks()


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL)
def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    with memo.locks(_key(body)):
        outcome = memo.reconciler.reconcile(body)
    _report(body, patch, outcome)


@kopf.timer(
    GROUP, VERSION, PLURAL, id="resync", interval=RESYNC_INTERVAL_S, initial_delay=RESYNC_INTERVAL_S
)
def resync(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    """Re-apply everything (drift the watches missed); only a spec change can drop a child."""
    with memo.locks(_key(body)):
        outcome = memo.reconciler.reconcile(body, prune=False)
    _report(body, patch, outcome)


@kopf.timer(GROUP, VERSION, PLURAL, interval=CACHE_FIGURES_INTERVAL_S)
def refresh_cache_figures(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    try:
        figures = memo.reconciler.cache_figures(body)
    except (RedisLiveError, KubeError) as error:
        logger.info(f"cache figures not refreshed: {error}")
        return
    previous = dict((body.get("status") or {}).get("cache") or {})
    previous.pop("updatedAt", None)
    if figures is not None and figures != previous:  # an idle cache costs no status writes
        patch.status["cache"] = {**figures, "updatedAt": timestamp_now()}


def _timers_without_finalizer(registry: kopf.OperatorRegistry) -> None:
    """Register the timers above without the finalizer kopf gives every timer.

    A finalizer makes deleting a service (or its namespace) hang whenever the operator is not
    running: after ``helm uninstall``, or while it crash-loops. The operator has nothing to do at
    deletion (children go by garbage collection through their owner references), and a timer of
    a deleted object may simply stop. kopf has no option for this, so the handlers are replaced
    by copies with ``requires_finalizer=False``; kopf then also removes a finalizer left on
    existing objects by an older operator.
    """
    spawning = registry._spawning
    spawning._handlers[:] = [
        dataclasses.replace(handler, requires_finalizer=False) for handler in spawning._handlers
    ]


_timers_without_finalizer(kopf.get_default_registry())


def restore(event: kopf.RawEvent, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A child was deleted or edited: re-apply it from its owner's spec."""
    if event["type"] not in ("DELETED", "MODIFIED"):
        return
    owners = [r for r in body.metadata.get("ownerReferences", []) if r.get("kind") == KIND]
    if not owners:
        return
    api_version = f"{GROUP}/{VERSION}"
    reconciler = memo.reconciler
    if event["type"] == "MODIFIED" and reconciler.versions.is_own(body):
        return  # our own apply, or a controller's status update: nothing to restore
    owner = reconciler.kube.get(api_version, KIND, body.metadata.namespace, owners[0]["name"])
    if owner is None or owner["metadata"].get("deletionTimestamp"):
        return  # the owner is gone: garbage collection takes the children
    with memo.locks(_key(owner)):
        if event["type"] == "MODIFIED" and reconciler.versions.is_own(body):
            return
        written = restore_child(reconciler, owner, body["kind"], body.metadata.name)
    for what in written:
        kopf.info(owner, reason="Restored", message=f"restored {what}")


for _api_version, _kind in CHILD_KINDS:
    kopf.on.event(_api_version, PLURALS[_kind], labels=MANAGED)(restore)


def _report(body: kopf.Body, patch: kopf.Patch, outcome: Outcome) -> None:
    current: Mapping[str, Any] = body.get("status") or {}
    for key, value in outcome.status.items():
        if current.get(key) != value:  # a status write only when something changed
            patch.status[key] = value
    for event in outcome.events:
        post = kopf.warn if event.warning else kopf.info
        post(body, reason=event.reason, message=event.message)
    if outcome.retry is not None:
        raise kopf.TemporaryError(outcome.retry, delay=RETRY_DELAY_S)


def _key(body: Any) -> str:
    return f"{body['metadata'].get('namespace')}/{body['metadata']['name']}"
