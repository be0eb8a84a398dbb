"""The one error a spec can produce: it says which field is wrong and what to write instead."""

from __future__ import annotations


class SpecError(ValueError):
    """A CachedInferenceService spec that cannot be turned into objects; the message says why."""
