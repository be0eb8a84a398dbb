"""kopf's record of what it last handled, built without copying what it throws away.

To tell a create or an update from a status write, kopf builds the "essence" of every event's
body (the spec, the labels and most annotations) and compares it with the copy it keeps in an
annotation. Its builder deep-copies the whole body first and then drops the metadata and the
status: a service's managedFields, its conditions and its served models, copied for every event
only to be thrown away. At 400 services applied at once that builder was 13% of the operator's
CPU. This one hands it only what it keeps, so the essence (and the annotation it is compared
with, written by earlier releases too) is the same.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import kopf

#: What kopf's builder reads of the metadata: the labels and annotations it keeps, and the
#: owners its storage keys may depend on (``CollisionEvadingConvention.mark_key``).
KEPT_METADATA = ("labels", "annotations", "ownerReferences")


class LeanAnnotationsDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """``AnnotationsDiffBaseStorage``, whose ``build`` copies no metadata or status it drops."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        if extra_fields:  # a handler that follows a status field: kopf's own way
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean: dict[str, Any] = {k: v for k, v in body.items() if k not in ("metadata", "status")}
        lean["metadata"] = {key: meta[key] for key in KEPT_METADATA if key in meta}
        return super().build(body=kopf.Body(cast(kopf.RawBody, lean)))
