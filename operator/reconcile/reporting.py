"""What one reconcile tells the world beyond the status: metrics, and which events to post.

The handlers and the periodic resync hand every outcome here; the handlers post the events it
lets through (kopf posts them), the resync only logs them (see ``periodic``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from cachefleet.operator.reconcile.announcements import EventFilter
from cachefleet.operator.reconcile.metrics import OperatorMetrics
from cachefleet.operator.reconcile.reconciler import Event, Outcome


def result_of(outcome: Outcome) -> str:
    """ok, retry (a transient failure, retried later) or stalled (the user must act)."""
    if outcome.retry is not None:
        return "retry"
    conditions = outcome.status.get("conditions") or []
    if any(c.get("type") == "Stalled" and c.get("status") == "True" for c in conditions):
        return "stalled"
    return "ok"


def ready_of(outcome: Outcome) -> tuple[bool, str] | None:
    """Ready's status and reason in the outcome; None when it says nothing of Ready."""
    for condition in outcome.status.get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True", str(condition.get("reason") or "")
    return None


@dataclass(frozen=True)
class Reporter:
    metrics: OperatorMetrics
    events: EventFilter = field(default_factory=EventFilter)

    def outcome(self, trigger: str, body: Mapping[str, Any], outcome: Outcome) -> list[Event]:
        """Count the outcome; the events worth posting (repeats within the window dropped)."""
        self.metrics.reconciles.labels(trigger, result_of(outcome)).inc()
        for event in outcome.events:
            if event.warning:
                self.metrics.reconcile_errors.labels(event.reason).inc()
        meta = body.get("metadata") or {}
        ready = ready_of(outcome)
        if ready is not None:
            name = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
            self.metrics.readiness.observe(*name, *ready)
        return list(self.admitted(body, outcome.events))

    def admitted(self, body: Mapping[str, Any], events: list[Event]) -> Iterator[Event]:
        return (e for e in events if self.events.admit(body, e.reason, e.message))
