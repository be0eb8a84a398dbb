"""Services the operator will not reconcile as they stand, for a reason other than their shape.

A refusal is a :class:`SpecError` with its own condition reason, so every path that already
stops on a bad spec (the reconcile, the restore of a deleted child) stops on it too: nothing is
applied, the service is Stalled with ``reason`` and a Warning event says the same.
"""

from __future__ import annotations

from cachefleet.operator.manifests.errors import SpecError

#: The platform's allow-lists (images, ServiceAccounts) refuse what the spec asks for.
NOT_ALLOWED = "NotAllowed"
#: The fleet Secret the pods read is gone, and the operator will not invent new keys unasked.
FLEET_SECRET_MISSING = "FleetSecretMissing"
#: A Secret the service did not create lacks a key the pods need.
FLEET_SECRET_INCOMPLETE = "FleetSecretIncomplete"


class Refused(SpecError):
    """Why the operator refuses a service; ``reason`` becomes the conditions' reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
