"""The release this operator belongs to, and the runtime image that goes with it.

A service that names no ``spec.runtime.image`` runs the runtime of the operator's own release, so
an operator upgrade upgrades the runtime with it: the two always agree on the runtime's settings
(the operator renders them; the runtime refuses settings it does not know).
"""

from __future__ import annotations

#: The version of this distribution (pyproject.toml), which is the chart's appVersion and the
#: images' tag; tests/operator/test_release.py keeps the three equal.
VERSION = "0.4.0"
RUNTIME_REPOSITORY = "ghcr.io/cachefleet/cachefleet"
RELEASE_RUNTIME_IMAGE = f"{RUNTIME_REPOSITORY}:{VERSION}"
