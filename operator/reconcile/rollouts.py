"""Paced rollouts: the runtime pods of at most a few fleets roll at a time.

An operator upgrade changes every fleet's pod template (a new runtime image, a new ConfigMap),
and rolling them all at once would empty every local cache in the cluster together and send the
whole load to the GPUs. So a reconcile that would change a fleet's pod template asks this gate
first: while ``limit`` other fleets are mid-rollout, it keeps the live template (everything else
is applied) and the service says ``RolloutQueued``; the retry goes ahead once fewer are rolling.

"Mid-rollout" is read from the live Deployments' status (the caller gives them: the operator
keeps kopf's index of its runtime Deployments), not from the operator's memory, so a restarted
operator keeps the pace. The only memory is the short gap between an apply and the watch event
that shows it: a fleet admitted here counts as rolling until its Deployment is seen at the
generation the apply gave it. A brand-new fleet (no live Deployment) is never queued, and a
rollout past its progress deadline no longer holds a place (it is Stalled; the user must act).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.manifests.meta import TEMPLATE_HASH_ANNOTATION
from cachefleet.operator.reconcile.observe import deployment_refusal, runtime_condition

FleetKey = tuple[str, str]
LiveDeployments = Callable[[], Iterable[Mapping[str, Any]]]
"""The live runtime Deployments of every fleet the operator serves (status included)."""
LiveDeployment = Callable[[FleetKey], Mapping[str, Any] | None]
"""One fleet's live runtime Deployment, or None."""


def key_of(deployment: Mapping[str, Any]) -> FleetKey:
    meta = deployment.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


def generation_of(deployment: Mapping[str, Any]) -> int:
    return int((deployment.get("metadata") or {}).get("generation") or 0)


def template_hash(deployment: Mapping[str, Any]) -> str | None:
    annotations = (deployment.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(TEMPLATE_HASH_ANNOTATION)
    return None if value is None else str(value)


def rolling(deployment: Mapping[str, Any]) -> bool:
    """Mid-rollout: not yet every replica updated and available (or the controller has not
    seen the latest template), and not given up on (past its progress deadline)."""
    if runtime_condition(deployment).status:
        return False
    refusal = deployment_refusal(deployment)
    return refusal is None or not refusal.lasting


def summary(deployment: Mapping[str, Any]) -> dict[str, Any]:
    """What the gate reads of a Deployment (for an index: the pod template is left out)."""
    meta = deployment.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    kept = {k: v for k, v in annotations.items() if k == TEMPLATE_HASH_ANNOTATION}
    return {
        "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"),
                     "generation": meta.get("generation"), "annotations": kept},
        "spec": {k: v for k, v in (deployment.get("spec") or {}).items() if k == "replicas"},
        "status": dict(deployment.get("status") or {}),
    }  # fmt: skip


def with_live_template(desired: Mapping[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """``desired`` (a runtime Deployment) with ``live``'s pod template and template digest: a
    queued fleet keeps running what it runs, and gets every other change (replicas, labels)."""
    template = copy.deepcopy(live["spec"]["template"])
    (template.get("metadata") or {}).pop("creationTimestamp", None)  # the server's null
    meta = desired["metadata"]
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(TEMPLATE_HASH_ANNOTATION, None)
    previous = template_hash(live)
    if previous is not None:
        annotations[TEMPLATE_HASH_ANNOTATION] = previous
    spec = {**desired["spec"], "template": template}
    return {**desired, "metadata": {**meta, "annotations": annotations}, "spec": spec}


@dataclass(frozen=True)
class Decision:
    """Whether a fleet may roll now; ``message`` says why not."""

    proceed: bool
    message: str = ""


@dataclass
class RolloutGate:
    """Admits template changes while fewer than ``limit`` other fleets are rolling.

    Thread-safe: handler threads and the periodic resync's workers ask at once. ``limit`` 0
    turns pacing off. ``find`` looks one fleet up (the operator's index by key); every fleet's
    Deployment is read only for a fleet whose pods would change: a resync, which asks for every
    fleet, would otherwise read them all for each (1,000 services: a million entries a pass).
    """

    limit: int
    live: LiveDeployments = lambda: ()
    find: LiveDeployment | None = None
    _guard: threading.Lock = field(default_factory=threading.Lock)
    #: Fleets admitted here whose apply the live view does not show yet: the generation the
    #: apply returned (None while it is being sent).
    _admitted: dict[FleetKey, int | None] = field(default_factory=dict)

    @contextmanager
    def admit(self, fleet: FleetKey, desired: Mapping[str, Any]) -> Iterator[Decision]:
        """Decide for ``desired`` (the Deployment about to be applied); the caller applies it
        inside the block and reports the server's answer with :meth:`applied`."""
        decision = self._decide(fleet, desired)
        try:
            yield decision
        except BaseException:
            with self._guard:
                if self._admitted.get(fleet, 0) is None:
                    del self._admitted[fleet]  # never sent: it holds no place
            raise

    def applied(self, fleet: FleetKey, response: Mapping[str, Any]) -> None:
        """The server's answer to an admitted apply: the fleet counts as rolling until the live
        view shows this generation (and from then on, as its status says)."""
        with self._guard:
            if fleet in self._admitted:
                self._admitted[fleet] = generation_of(response)

    def _decide(self, fleet: FleetKey, desired: Mapping[str, Any]) -> Decision:
        if self.limit <= 0:
            return Decision(True)
        with self._guard:
            current = self._find(fleet)
            if current is None or template_hash(current) == template_hash(desired):
                return Decision(True)  # a new fleet, or no change to its pods
            live = {key_of(d): d for d in self.live()}
            others = sorted(k for k in self._rolling(live) if k != fleet)
            if len(others) >= self.limit:
                names = ", ".join(f"{ns}/{name}" for ns, name in others[:5])
                more = f" and {len(others) - 5} more" if len(others) > 5 else ""
                return Decision(
                    False,
                    f"the runtime pods' rollout waits: {len(others)} other fleets are rolling "
                    f"({names}{more}) and at most {self.limit} roll at a time "
                    f"(the operator's maxConcurrentRollouts)",
                )
            self._admitted[fleet] = None
            return Decision(True)

    def _find(self, fleet: FleetKey) -> Mapping[str, Any] | None:
        if self.find is not None:
            return self.find(fleet)
        return next((d for d in self.live() if key_of(d) == fleet), None)

    def _rolling(self, live: Mapping[FleetKey, Mapping[str, Any]]) -> set[FleetKey]:
        found = {key for key, deployment in live.items() if rolling(deployment)}
        for key, generation in list(self._admitted.items()):
            seen = live.get(key)
            if generation is not None and (seen is None or generation_of(seen) >= generation):
                # The live view has caught up (its status decides), or the fleet is gone.
                del self._admitted[key]
            else:
                found.add(key)
        return found
