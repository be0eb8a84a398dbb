"""Changes to the Redis pod that wait for the pod's own next restart.

One change waits: how the password reaches ``redis-server``. Releases up to 0.3.0 passed it on
the command line (``--requirepass``, readable by anyone on the node); this one hands it to Redis
on its standard input. That is a change of the pod template, and applying it as any other would
have the StatefulSet controller restart every managed Redis with a password at once on an
operator upgrade, each emptying its cache (or reloading it, with persistence). So while the
password's delivery is the only difference between what the Redis pod runs and what the operator
renders, the StatefulSet is applied with the ``OnDelete`` update strategy: its template is the
new one, and the controller makes each pod from it when that pod is replaced for its own reasons
(deleted, evicted, its node lost). Any other change (one the user made, which rolls Redis
anyway) is applied with ``RollingUpdate``, as always, and the roll brings the new form with it.

Decided from what the cluster shows, never from the operator's memory (a restarted operator
decides the same):

1. No Redis pod (the pod index) runs with the password on its command line: nothing waits, the
   StatefulSet is applied as rendered (``RollingUpdate``). This is every service made by this
   release, and every one whose Redis has restarted once: no extra request.
2. Else the live StatefulSet is read. Its template still starts Redis the old way (the upgrade's
   first reconcile, or one interrupted halfway): the server is asked, with a dry-run apply,
   what it would store for the rendered StatefulSet in the old form; when that is the live
   template, only the delivery differs, and the StatefulSet first gets the rendered strategy
   (the operator then owns ``rollingUpdate``, which ``OnDelete`` forbids and the next apply
   drops) and then the new template with ``OnDelete``. A refused dry-run (an immutable field
   changed too) is no such case: the StatefulSet is applied as rendered and the claims path
   (``claims``) takes it, rolling Redis as it does.
3. Its template is the new one and its strategy ``OnDelete``: the operator deferred the change
   before. The template digest it wrote then (``cachefleet.io/template-hash`` on the
   StatefulSet) is the rendered one still: keep waiting. It is not: the user changed something,
   and the StatefulSet is applied as rendered, which rolls the pod.

Once the pod is replaced, step 1 applies the rendered strategy again: the pod already runs the
StatefulSet's revision, so that rolls nothing.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION
from cachefleet.operator.manifests.redis import (
    password_on_command_line,
    with_password_on_command_line,
)
from cachefleet.operator.reconcile.kube import Kube, KubeError

ON_DELETE: dict[str, Any] = {"type": "OnDelete"}
#: The reason of the event said when a Redis's restart is deferred.
DEFERRED = "RestartDeferred"
DEFERRED_MESSAGE = (
    "the Redis pod keeps its password on its command line until it restarts for its own reasons "
    "(deleted, evicted, node lost) or a change of the spec rolls it: the StatefulSet's update "
    "strategy is OnDelete until then, so that this operator's upgrade restarts no Redis"
)


@dataclass(frozen=True)
class Deferral:
    """The children to apply, and the event to say when the deferral began now (else None)."""

    children: list[dict[str, Any]]
    began: str | None = None


def defer_redis_restarts(
    kube: Kube, children: list[dict[str, Any]], redis_pods: Iterable[Mapping[str, Any]]
) -> Deferral:
    """``children`` with the Redis StatefulSet's strategy decided (see the module docstring)."""
    desired = next((c for c in children if c["kind"] == "StatefulSet"), None)
    if desired is None or not any(_old_form(pod) for pod in redis_pods):
        return Deferral(children)
    meta = desired["metadata"]
    live = kube.get("apps/v1", "StatefulSet", meta["namespace"], meta["name"])
    if live is None:
        return Deferral(children)
    began = None
    if _old_form(live["spec"]["template"]):
        old = with_password_on_command_line(desired)
        if not _stores_as(kube, old, live):
            return Deferral(children)
        if _strategy(live) != ON_DELETE["type"]:
            kube.apply(old)  # the rendered strategy, owned, on the template that runs
            began = DEFERRED_MESSAGE
    elif _strategy(live) != ON_DELETE["type"] or template_hash(live) != template_hash(desired):
        return Deferral(children)
    waiting = on_delete(desired)
    return Deferral([waiting if c is desired else c for c in children], began)


def on_delete(statefulset: Mapping[str, Any]) -> dict[str, Any]:
    """``statefulset`` with the ``OnDelete`` strategy (and no ``rollingUpdate``, which it
    forbids)."""
    waiting = copy.deepcopy(dict(statefulset))
    waiting["spec"]["updateStrategy"] = dict(ON_DELETE)
    return waiting


def template_hash(statefulset: Mapping[str, Any]) -> str | None:
    annotations = (statefulset.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(TEMPLATE_HASH_ANNOTATION)
    return None if value is None else str(value)


def _old_form(pod: Mapping[str, Any]) -> bool:
    """Whether a pod (or a pod template) starts Redis with the password on its command line."""
    containers: Sequence[Mapping[str, Any]] = (pod.get("spec") or {}).get("containers") or ()
    return any(password_on_command_line(container) for container in containers)


def _strategy(statefulset: Mapping[str, Any]) -> str:
    strategy = (statefulset.get("spec") or {}).get("updateStrategy") or {}
    return str(strategy.get("type") or "RollingUpdate")


def _stores_as(kube: Kube, obj: Mapping[str, Any], live: Mapping[str, Any]) -> bool:
    """Whether the server would store ``obj``'s pod template as ``live``'s (a dry-run apply:
    its defaults and merge, nothing stored)."""
    try:
        answer = kube.apply(obj, dry_run=True)
    except KubeError as error:
        if error.invalid:
            return False  # refused (an immutable field changed too): applied as rendered
        raise
    return bool(answer["spec"]["template"] == live["spec"]["template"])
