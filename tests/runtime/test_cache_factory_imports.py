"""A server whose cache has no Redis tier never imports redis-py: its import is about a third of
a server's start-up, paid by every pod of a local-only service at each start."""

from __future__ import annotations

import subprocess
import sys

import pytest

BUILD = """
import sys
from cachefleet.runtime.cache.factory import build_cache
from cachefleet.runtime.config import RuntimeSettings
from cachefleet.runtime.metrics import RuntimeMetrics
import cachefleet.runtime.server
settings = RuntimeSettings.model_validate({"cache": {"mode": "%s"}, "redis": {"url": "%s"}})
cache = build_cache(settings, RuntimeMetrics())
print(type(cache).__name__, "redis" in sys.modules)
"""


@pytest.mark.parametrize(
    ("mode", "imports_redis"),
    [("none", False), ("local", False), ("redis", True), ("tiered", True)],
)
def test_redis_py_is_imported_only_for_a_redis_tier(mode: str, imports_redis: bool) -> None:
    code = BUILD % (mode, "redis://127.0.0.1:1/0")
    done = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    kind, imported = done.stdout.split()
    assert kind == ("NullCache" if mode == "none" else "ReadThroughCache")
    assert imported == str(imports_redis)
