"""What to do when the API server refuses a StatefulSet update: its immutable fields changed.

A StatefulSet's ``selector``, ``serviceName`` and ``volumeClaimTemplates`` cannot be updated
(https://kubernetes.io/docs/concepts/workloads/controllers/statefulset/#limitations ; the server
answers 422 "updates to statefulset spec for fields other than ... are forbidden"). Each change
gets a deliberate path here, decided from the live and the desired object (no I/O):

- persistence switched on or off, or a changed selector or Service name: re-create the
  StatefulSet, orphaning its pod so the new one adopts and rolls it; switched off, the claims
  no template names any more are deleted (the orphaning delete strips their owner reference, so
  nothing else would), unless the spec retains claims; switched on, a claim left from before is
  deleted for a fresh one, or, when retained, grown to the new size;
- a larger claim: expand the existing claims (when the storage class allows it) and re-create;
- a smaller claim or another storage class: an existing claim cannot change that way, so the
  service stalls with a message saying what to do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cachefleet.operator.reconcile.kube import Cause
from cachefleet.runtime.config import QuantityError, parse_bytes

Action = Literal["none", "recreate", "expand", "blocked"]

#: The one refusal the deliberate paths answer: the API server's cause for an update of an
#: immutable StatefulSet field (reason FieldValueForbidden, field "spec").
IMMUTABLE_FIELDS_CAUSE = "updates to statefulset spec for fields other than"


def only_immutable_fields(causes: Iterable[Cause]) -> bool:
    """Whether the server refused the StatefulSet for its immutable fields and nothing else.

    A refusal also naming another cause (an invalid value edited in the same change) must be
    reported as it is: expanding claims and deleting the StatefulSet would end in a re-apply
    the server refuses again, with the Redis pod orphaned.
    """
    found = list(causes)
    return bool(found) and all(
        cause.reason == "FieldValueForbidden"
        and cause.field == "spec"
        and IMMUTABLE_FIELDS_CAUSE in cause.message
        for cause in found
    )


@dataclass(frozen=True)
class ClaimChange:
    """The path for one refused StatefulSet update; ``size`` and ``claims`` are for ``expand``."""

    action: Action
    message: str = ""
    size: str = ""
    storage_class: str | None = None
    claims: tuple[str, ...] = ()
    #: Persistence switched off: the claims nothing will use any more (kept when the spec
    #: retains claims). The orphaning delete strips their owner reference, so garbage
    #: collection would never take them.
    dropped: tuple[str, ...] = ()
    #: Persistence switched on: the claims the new template names; one left from before
    #: (stripped of its owner) would be reused with its old size and stale data.
    adopted: tuple[str, ...] = ()
    retain: bool = False


def plan_claim_change(live: Mapping[str, Any], desired: Mapping[str, Any]) -> ClaimChange:
    live_spec, desired_spec = live.get("spec") or {}, desired.get("spec") or {}
    name = desired["metadata"]["name"]
    for field in ("selector", "serviceName"):
        if live_spec.get(field) != desired_spec.get(field):
            return ClaimChange("recreate", f"{field} changed")
    old, new = _templates(live_spec), _templates(desired_spec)
    replicas = int(live_spec.get("replicas") or 1)

    def claims_of(templates: Iterable[str]) -> tuple[str, ...]:
        return tuple(
            f"{template}-{name}-{ordinal}" for template in templates for ordinal in range(replicas)
        )

    if old.keys() != new.keys():
        policy = desired_spec.get("persistentVolumeClaimRetentionPolicy") or {}
        retain = policy.get("whenDeleted") == "Retain"
        added = sorted(new.keys() - old.keys())
        size = str(new[added[0]][1]) if added else ""
        storage_class = new[added[0]][0] if added else None
        return ClaimChange(
            "recreate",
            "persistence was switched on or off",
            size=size,
            storage_class=storage_class,
            dropped=() if retain else claims_of(sorted(old.keys() - new.keys())),
            adopted=claims_of(added),
            retain=retain,
        )
    for template, (old_class, old_size) in old.items():
        new_class, new_size = new[template]
        claims = tuple(f"{template}-{name}-{ordinal}" for ordinal in range(replicas))
        if old_class != new_class:
            return ClaimChange("blocked", _class_message(name, claims, old_class, new_class))
        old_bytes, new_bytes = _bytes(old_size), _bytes(new_size)
        if old_bytes is None or new_bytes is None or new_bytes == old_bytes:
            continue
        if new_bytes < old_bytes:
            return ClaimChange("blocked", _shrink_message(name, claims, old_size, new_size))
        return ClaimChange("expand", "", str(new_size), new_class, claims)
    return ClaimChange("none")


def not_expandable_message(change: ClaimChange, reason: str) -> str:
    where = change.storage_class or "the cluster's default class"
    return (
        f"cache.redis.persistence.size cannot grow to {change.size}: the API server refused to "
        f"expand the claim(s) {', '.join(change.claims)} ({reason}); storage class {where} must "
        f"allow volume expansion (allowVolumeExpansion: true). Put the size back, or delete the "
        f"StatefulSet and the claim(s) (this drops the persisted cache) for new ones"
    )


def _templates(spec: Mapping[str, Any]) -> dict[str, tuple[str | None, Any]]:
    found = {}
    for template in spec.get("volumeClaimTemplates") or []:
        claim = template.get("spec") or {}
        size = ((claim.get("resources") or {}).get("requests") or {}).get("storage")
        found[template["metadata"]["name"]] = (claim.get("storageClassName"), size)
    return found


def _bytes(size: Any) -> int | None:
    try:
        return None if size is None else parse_bytes(size)
    except QuantityError:
        return None


def _class_message(name: str, claims: tuple[str, ...], old: str | None, new: str | None) -> str:
    return (
        f"cache.redis.persistence.storageClassName cannot change from {old or 'the default'} to "
        f"{new or 'the default'}: existing claims keep their class. Put it back, or delete the "
        f"StatefulSet {name} and the claim(s) {', '.join(claims)} (this drops the persisted "
        f"cache) and the operator creates them with the new class"
    )


def _shrink_message(name: str, claims: tuple[str, ...], old: Any, new: Any) -> str:
    return (
        f"cache.redis.persistence.size cannot shrink from {old} to {new}: a volume only grows. "
        f"Put the size back, or delete the StatefulSet {name} and the claim(s) "
        f"{', '.join(claims)} (this drops the persisted cache)"
    )
