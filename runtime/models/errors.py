"""Why a model could not be loaded. Shown in the repository index, never sent as a response."""

from __future__ import annotations


class ModelLoadError(Exception):
    """A model or version cannot be served: bad config, unreadable file, graph mismatch."""
